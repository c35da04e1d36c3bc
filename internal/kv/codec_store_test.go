package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/stretchr/testify/require"
)

// The records the store writes along the task path are read by the
// hand-written reader, never by the encoding/json fallback.
func TestStoreRecordsTakeTheFastPath(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	store, err := kv.NewStore(ctx, js, nil)
	require.NoError(t, err)
	deadline := time.Now().Add(time.Hour).UTC()
	rec, rev, err := store.Create(ctx, &kv.Record{ID: "01JFASTPATH0000000000000000", Type: "noop", Tenant: "default", Key: "_", Priority: 2,
		State: kv.StateReady, MaxAttempts: 3, Timeout: kv.Duration(time.Minute), Gen: 1, Stream: "AX_P2", StreamSeq: 7, Deadline: &deadline},
		kv.Actor{Action: "submit"})
	require.NoError(t, err)
	rec, rev, err = store.Apply(ctx, rec, rev, kv.StateRunning, kv.Actor{Worker: "host-1.pid-2", Action: "claim"}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.Attempt, r.Worker, r.Delivery, r.StartedAt = 1, "host-1.pid-2", 1, &now
		return nil
	})
	require.NoError(t, err)
	_, _, err = store.Apply(ctx, rec, rev, kv.StateSucceeded, kv.Actor{Worker: "host-1.pid-2", Action: "complete"}, nil)
	require.NoError(t, err)
	entry, err := store.Bucket().Get(ctx, rec.Ref().Key())
	require.NoError(t, err)
	fast, err := kv.DecodeFast(entry.Value())
	require.NoError(t, err, string(entry.Value()))
	require.Len(t, fast.Trail, 3)
}
