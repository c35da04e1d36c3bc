package kv_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

type testBundle struct {
	js    jetstream.JetStream
	store *kv.Store
}

func setup(t *testing.T, cfg *kv.StoreConfig) *testBundle {
	t.Helper()
	return setupB(t, cfg)
}

// setupFast is setup for a test of the fast tier (go test -short).
func setupFast(t *testing.T) *testBundle {
	t.Helper()
	return setupOn(t, natstest.Options{Fast: true}, nil)
}

func setupB(t testing.TB, cfg *kv.StoreConfig) *testBundle {
	t.Helper()
	return setupOn(t, natstest.Options{}, cfg)
}

func setupOn(t testing.TB, o natstest.Options, cfg *kv.StoreConfig) *testBundle {
	t.Helper()
	_, js := natstest.Start(t, o).Connect()
	natstest.Provision(t, js, nil)
	store, err := kv.NewStore(context.Background(), js, cfg)
	require.NoError(t, err)
	return &testBundle{js: js, store: store}
}

// legal is docs/WIRE.md's table ("States"), written out independently of the code's.
var legal = map[kv.State][]kv.State{
	kv.StatePending:   {kv.StateReady, kv.StateCancelled, kv.StatePaused, kv.StatePending, kv.StateDead}, // PENDING -> PENDING: reprioritize
	kv.StateReady:     {kv.StateRunning, kv.StateCancelled, kv.StatePaused, kv.StateReady, kv.StateDead, kv.StatePending},
	kv.StateRunning:   {kv.StateSucceeded, kv.StateRetrying, kv.StateDead, kv.StateCancelled, kv.StateReady},
	kv.StateRetrying:  {kv.StateRunning, kv.StateDead, kv.StateCancelled, kv.StatePaused, kv.StateReady, kv.StatePending}, // RETRYING -> PENDING: paused aside
	kv.StateSucceeded: nil,
	kv.StateDead:      {kv.StateReady},
	kv.StateCancelled: nil,
	kv.StatePaused:    {kv.StateReady, kv.StateCancelled, kv.StatePending, kv.StatePaused}, // PAUSED -> PENDING: resume before release; PAUSED -> PAUSED: bind a held id's first message
}

// put writes a record in any state, bypassing the state machine, to set up
// a pair test.
func put(t *testing.T, b *testBundle, id string, s kv.State) {
	t.Helper()
	_, err := b.js.Publish(context.Background(), "$KV.AX_TASKS.t."+id, fmt.Appendf(nil, `{"id":%q,"type":"x","tenant":"t","key":%q,"state":%q,"trail":[]}`, id, id, s))
	require.NoError(t, err)
}

func TestEveryTransitionPair(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	require.Len(t, kv.States(), 8)
	for _, from := range kv.States() {
		for _, to := range kv.States() {
			t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
				want := slices.Contains(legal[from], to)
				require.Equal(t, want, kv.CanTransition(from, to))
				id := fmt.Sprintf("pair-%s-%s", from, to)
				put(t, b, id, from)
				rec, _, err := b.store.Transition(ctx, tref(id), from, to, kv.Actor{Worker: "w1", Action: "test"}, nil)
				if !want {
					require.ErrorIs(t, err, kv.ErrIllegalTransition)
					got, _, err := b.store.Get(ctx, tref(id))
					require.NoError(t, err)
					require.Equal(t, from, got.State, "an illegal move must not write")
					return
				}
				require.NoError(t, err)
				require.Equal(t, to, rec.State)
				got, _, err := b.store.Get(ctx, tref(id))
				require.NoError(t, err)
				require.Equal(t, to, got.State)
				move := got.LastMove()
				require.Equal(t, kv.Move{Task: id, From: from, To: to, Worker: "w1", At: move.At, Took: move.Took, Action: "test"}, move)
			})
		}
	}
}

func TestTransitionChecksCurrentState(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	put(t, b, "t1", kv.StateRunning)
	_, _, err := b.store.Transition(context.Background(), tref("t1"), kv.StateReady, kv.StateRunning, kv.Actor{}, nil)
	require.ErrorIs(t, err, kv.ErrWrongState)
	require.Contains(t, err.Error(), "it is RUNNING")
	_, _, err = b.store.Transition(context.Background(), tref("nope"), kv.StateReady, kv.StateRunning, kv.Actor{}, nil)
	require.ErrorIs(t, err, kv.ErrNotFound)
}

func TestBirths(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	for _, s := range kv.States() {
		id := "born-" + string(s)
		_, _, err := b.store.Create(ctx, &kv.Record{ID: id, Type: "x", Tenant: "t", Key: id, State: s}, kv.Actor{Action: "submit"})
		if kv.CanBeBornAs(s) {
			require.NoError(t, err, s)
			rec, _, err := b.store.Get(ctx, tref(id))
			require.NoError(t, err)
			require.Equal(t, []kv.Move{{Task: id, To: s, At: rec.Trail[0].At, Action: "submit"}}, rec.Trail)
		} else {
			require.ErrorIs(t, err, kv.ErrIllegalTransition, s)
		}
	}
	require.ElementsMatch(t, []kv.State{kv.StatePending, kv.StateReady, kv.StateRunning, kv.StateCancelled, kv.StatePaused, kv.StateDead},
		slices.DeleteFunc(kv.States(), func(s kv.State) bool { return !kv.CanBeBornAs(s) }))
	_, _, err := b.store.Create(ctx, &kv.Record{ID: "born-READY", Type: "x", Tenant: "t", State: kv.StateReady}, kv.Actor{})
	require.ErrorIs(t, err, kv.ErrExists)
}

// A record is created over the delete marker its key's expiry or removal
// left (an id used again after its record's retention), and not over a
// record. Red when Create writes only on a key without any message.
func TestCreateOverDeleteMarker(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	rec := &kv.Record{ID: "again", Type: "x", Tenant: "t", State: kv.StateReady}
	_, first, err := b.store.Create(ctx, rec, kv.Actor{Action: "submit"})
	require.NoError(t, err)
	require.NoError(t, b.store.Bucket().Delete(ctx, rec.Ref().Key()))
	_, _, err = b.store.Get(ctx, rec.Ref())
	require.ErrorIs(t, err, kv.ErrNotFound)
	got, rev, err := b.store.Create(ctx, rec, kv.Actor{Action: "submit"})
	require.NoError(t, err, "created over the marker")
	require.Greater(t, rev, first+1, "written after the marker")
	require.Equal(t, kv.StateReady, got.State)
	_, _, err = b.store.Create(ctx, rec, kv.Actor{Action: "submit"})
	require.ErrorIs(t, err, kv.ErrExists)
}

// 32 goroutines claim the same READY task: exactly one wins, every round.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	const rounds, racers = 25, 32
	for round := range rounds {
		id := fmt.Sprintf("race-%d", round)
		_, _, err := b.store.Create(ctx, &kv.Record{ID: id, Type: "x", Tenant: "t", Key: id, State: kv.StateReady}, kv.Actor{})
		require.NoError(t, err)
		var wins atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		start := make(chan struct{})
		for r := range racers {
			wg.Go(func() {
				<-start
				worker := fmt.Sprintf("w%d", r)
				_, _, err := b.store.Transition(ctx, tref(id), kv.StateReady, kv.StateRunning, kv.Actor{Worker: worker}, func(rec *kv.Record) error {
					rec.Worker = worker
					return nil
				})
				switch {
				case err == nil:
					wins.Add(1)
					winner.Store(worker)
				case errors.Is(err, kv.ErrConflict), errors.Is(err, kv.ErrWrongState):
				default:
					t.Errorf("racer %d: unexpected error %v", r, err)
				}
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, wins.Load(), "round %d", round)
		rec, _, err := b.store.Get(ctx, tref(id))
		require.NoError(t, err)
		require.Equal(t, kv.StateRunning, rec.State)
		require.Equal(t, winner.Load(), rec.Worker)
		require.Len(t, rec.Trail, 2)
	}
}

func TestTerminalRecordsExpire(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, &streams.Config{Duplicates: time.Second}) // a retention may not be shorter
	ctx := context.Background()
	store, err := kv.NewStore(ctx, js, &kv.StoreConfig{Retention: time.Second})
	require.NoError(t, err)
	b := &testBundle{js: js, store: store}
	_, _, err = b.store.Create(ctx, &kv.Record{ID: "t1", Type: "x", Tenant: "t", State: kv.StateRunning}, kv.Actor{})
	require.NoError(t, err)
	_, _, err = b.store.Transition(ctx, tref("t1"), kv.StateRunning, kv.StateSucceeded, kv.Actor{}, nil)
	require.NoError(t, err)
	rec, _, err := b.store.Get(ctx, tref("t1"))
	require.NoError(t, err)
	require.Equal(t, kv.StateSucceeded, rec.State)
	require.Eventually(t, func() bool {
		_, _, err := b.store.Get(ctx, tref("t1"))
		return errors.Is(err, kv.ErrNotFound)
	}, 10*time.Second, 100*time.Millisecond)

	// DEAD records stay until replayed.
	_, _, err = b.store.Create(ctx, &kv.Record{ID: "t2", Type: "x", Tenant: "t", State: kv.StateRunning}, kv.Actor{})
	require.NoError(t, err)
	_, _, err = b.store.Transition(ctx, tref("t2"), kv.StateRunning, kv.StateDead, kv.Actor{}, nil)
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // longer than the retention: must still be there
	rec, _, err = b.store.Get(ctx, tref("t2"))
	require.NoError(t, err)
	require.Equal(t, kv.StateDead, rec.State)
}

func TestTrailRecordsEveryMove(t *testing.T) {
	t.Parallel()
	b := setup(t, &kv.StoreConfig{TrailStream: true})
	ctx := context.Background()
	_, _, err := b.store.Create(ctx, &kv.Record{ID: "t1", Type: "x", Tenant: "t", State: kv.StateReady}, kv.Actor{Action: "submit"})
	require.NoError(t, err)
	path := []kv.State{kv.StateRunning, kv.StateRetrying, kv.StateRunning, kv.StateSucceeded}
	from := kv.StateReady
	for _, to := range path {
		_, _, err := b.store.Transition(ctx, tref("t1"), from, to, kv.Actor{Worker: "w1", Error: "e-" + string(to)}, nil)
		require.NoError(t, err)
		from = to
	}
	trail, err := b.store.Trail(ctx, tref("t1"))
	require.NoError(t, err)
	var got []string
	for _, m := range trail {
		got = append(got, fmt.Sprintf("%s>%s", m.From, m.To))
	}
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>RETRYING", "RETRYING>RUNNING", "RUNNING>SUCCEEDED"}, got)

	// The same moves reach AX_TRAIL.
	stream, err := b.js.Stream(ctx, "AX_TRAIL")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == 5
	}, 5*time.Second, 50*time.Millisecond)
}

// Issue 11.5: a record retention shorter than the de-duplication window is
// refused, naming both: a re-submit after the record expired would be
// de-duplicated (no message) yet write a new READY record.
func TestRetentionShorterThanDuplicateWindowRefused(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, &streams.Config{Duplicates: 2 * time.Minute})
	ctx := context.Background()
	_, err := kv.NewStore(ctx, js, &kv.StoreConfig{Retention: time.Minute})
	require.ErrorIs(t, err, kv.ErrRetentionTooShort)
	require.Contains(t, err.Error(), "1m0s")
	require.Contains(t, err.Error(), "2m0s")
	for _, ok := range []time.Duration{2 * time.Minute, time.Hour, -1} {
		_, err := kv.NewStore(ctx, js, &kv.StoreConfig{Retention: ok})
		require.NoError(t, err, ok)
	}
}

// tref names task id of the tenant "t" the tests' records have.
func tref(id string) kv.Ref { return kv.Ref{Tenant: "t", ID: id} }

// A record key holding a value ax did not write (a publish acknowledgement
// a reply subject pointed at it) reads as a *ForeignError with its revision
// and value; Repair rebuilds the record over it by compare-and-set (its
// trail's first move names the value) and refuses once the key changed.
func TestRepairForeignRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ref := kv.Ref{Tenant: "t", ID: "forged"}
	_, err := b.js.Publish(ctx, "$KV.AX_TASKS."+ref.Key(), []byte(`{"stream":"AX_P2","seq":12}`))
	require.NoError(t, err)
	_, _, err = b.store.Get(ctx, ref)
	require.ErrorIs(t, err, kv.ErrForeignRecord)
	var found *kv.ForeignError
	require.ErrorAs(t, err, &found)
	require.Equal(t, `{"stream":"AX_P2","seq":12}`, string(found.Value))

	rebuilt := &kv.Record{ID: ref.ID, Tenant: ref.Tenant, Type: "x", Key: "k", State: kv.StateReady}
	_, _, err = b.store.Repair(ctx, found, &kv.Record{ID: "other", Tenant: "t", Type: "x", State: kv.StateReady}, kv.Actor{Worker: "w"})
	require.ErrorContains(t, err, "names task")
	rec, rev, err := b.store.Repair(ctx, found, rebuilt, kv.Actor{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, kv.RepairAction, rec.Trail[0].Action)
	require.Contains(t, rec.Trail[0].Error, `{"stream":"AX_P2","seq":12}`)
	got, gotRev, err := b.store.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, rev, gotRev)
	require.Equal(t, kv.StateReady, got.State)
	_, _, err = b.store.Repair(ctx, found, rebuilt, kv.Actor{Worker: "w"})
	require.ErrorIs(t, err, kv.ErrConflict, "the key changed since the foreign value was read")
}
