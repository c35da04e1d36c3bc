package kv_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/stretchr/testify/require"
)

// batchLog records the key sets of a store's read requests; the first
// request waits hold, so that the reads that arrive meanwhile queue behind
// it and go out together.
type batchLog struct {
	hold time.Duration
	mu   sync.Mutex
	sets [][]string
}

func (l *batchLog) hooks() *kv.ReadTestHooks {
	return &kv.ReadTestHooks{Batch: func(keys []string) {
		l.mu.Lock()
		first := len(l.sets) == 0
		l.sets = append(l.sets, keys)
		l.mu.Unlock()
		if first {
			time.Sleep(l.hold)
		}
	}}
}

func (l *batchLog) largest() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sets {
		n = max(n, len(s))
	}
	return n
}

// Concurrent reads go out together, and each answers exactly as a read of
// its own would: the live record and its revision, or not found for a key
// never written, deleted, or read twice in one batch.
func TestBatchedReadsAnswerAsSingleReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	log := &batchLog{hold: 300 * time.Millisecond}
	store, err := kv.NewStore(ctx, js, &kv.StoreConfig{Test: kv.StoreTestConfig{Reads: log.hooks()}})
	require.NoError(t, err)
	plain, err := kv.NewStore(ctx, js, nil) // reads alone: the reference
	require.NoError(t, err)

	const n = 120
	refs := make([]kv.Ref, n)
	for i := range refs {
		refs[i] = kv.Ref{Tenant: "acme", ID: fmt.Sprintf("t%03d", i)}
		switch i % 4 {
		case 0: // never written
		case 1: // written, then deleted
			_, rev, err := store.Create(ctx, &kv.Record{ID: refs[i].ID, Tenant: "acme", Type: "x", State: kv.StateReady}, kv.Actor{Action: "test"})
			require.NoError(t, err)
			require.NoError(t, store.Delete(ctx, refs[i], rev))
		default: // live, moved once for some
			rec, rev, err := store.Create(ctx, &kv.Record{ID: refs[i].ID, Tenant: "acme", Type: "x", State: kv.StateReady}, kv.Actor{Action: "test"})
			require.NoError(t, err)
			if i%4 == 3 {
				_, _, err = store.Apply(ctx, rec, rev, kv.StateRunning, kv.Actor{Action: "test"}, nil)
				require.NoError(t, err)
			}
		}
	}

	type answer struct {
		state kv.State
		rev   uint64
		err   error
	}
	got := make([]answer, 2*n)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			rec, rev, err := store.Get(ctx, refs[i%n]) // each key twice
			a := answer{rev: rev, err: err}
			if rec != nil {
				a.state = rec.State
			}
			got[i] = a
		})
	}
	wg.Wait()
	require.Greater(t, log.largest(), 1, "reads that waited for one in flight went out together")

	for i, a := range got {
		ref := refs[i%n]
		rec, rev, err := plain.Get(ctx, ref)
		if err != nil {
			require.ErrorIs(t, err, kv.ErrNotFound, ref.String())
			require.ErrorIs(t, a.err, kv.ErrNotFound, "%s: a batched read says what a single read says", ref)
			continue
		}
		require.NoError(t, a.err, ref.String())
		require.Equal(t, rec.State, a.state, ref.String())
		require.Equal(t, rev, a.rev, ref.String())
	}
}

// A read whose context ends while it waits for a batch returns at once
// with its context's error, and the reads behind it are still answered.
func TestBatchedReadCallerGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	log := &batchLog{hold: 500 * time.Millisecond}
	store, err := kv.NewStore(ctx, js, &kv.StoreConfig{Test: kv.StoreTestConfig{Reads: log.hooks()}})
	require.NoError(t, err)
	ref := kv.Ref{Tenant: "acme", ID: "live"}
	_, _, err = store.Create(ctx, &kv.Record{ID: ref.ID, Tenant: "acme", Type: "x", State: kv.StateReady}, kv.Actor{Action: "test"})
	require.NoError(t, err)

	first := make(chan error, 1)
	go func() { _, _, err := store.Get(ctx, ref); first <- err }()
	time.Sleep(50 * time.Millisecond) // the first read is in flight (held)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = store.Get(short, ref)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 400*time.Millisecond, "it did not wait for the batch")

	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() { _, _, errs[i] = store.Get(ctx, ref) })
	}
	require.NoError(t, <-first)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}
