package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Records of ax before v3 were keyed by the task id alone, and a delayed
// task's schedule fired into ax.due.<id>. `ax provision` moves them under
// their tenant: a PENDING task's schedule then fires into its tenant's due
// subject, and a finished record keeps what is left of its retention.
func TestMigrateKeysMovesRecordsAndSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	names := streams.DefaultNames()
	bucket := b.store.Bucket()
	_, err := bucket.Put(ctx, "later", []byte(`{"id":"later","type":"x","tenant":"acme","key":"k","priority":2,"state":"PENDING","gen":1,"trail":[]}`))
	require.NoError(t, err)
	_, err = b.js.Publish(ctx, "$KV.AX_TASKS.done", []byte(`{"id":"done","type":"x","tenant":"globex","key":"k","state":"SUCCEEDED","trail":[]}`),
		jetstream.WithMsgTTL(time.Hour))
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "junk", []byte(`{"stream":"AX_P2","seq":7}`))
	require.NoError(t, err)
	sched := nats.NewMsg("ax.delayed.later")
	sched.Data = []byte("payload")
	sched.Header.Set("Ax-Run-At", time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano))
	sched.Header.Set(streams.HeaderSchedule, "@at "+time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano))
	sched.Header.Set(streams.HeaderScheduleTarget, "ax.due.later")
	_, err = b.js.PublishMsg(ctx, sched)
	require.NoError(t, err)

	report, err := kv.MigrateKeys(ctx, b.js, names)
	require.NoError(t, err)
	require.Equal(t, 2, report.Moved)
	require.Contains(t, report.Skipped, "junk")
	for _, ref := range []kv.Ref{{Tenant: "acme", ID: "later"}, {Tenant: "globex", ID: "done"}} {
		rec, _, err := b.store.Get(ctx, ref)
		require.NoError(t, err, ref)
		require.Equal(t, ref, rec.Ref())
	}
	for _, old := range []string{"later", "done"} {
		_, err := bucket.Get(ctx, old)
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, old)
	}
	kvStream, err := b.js.Stream(ctx, "KV_AX_TASKS")
	require.NoError(t, err)
	done, err := kvStream.GetLastMsgForSubject(ctx, "$KV.AX_TASKS.globex.done")
	require.NoError(t, err)
	require.NotEmpty(t, done.Header.Get(jetstream.MsgTTLHeader), "the finished record still expires")

	delayed, err := b.js.Stream(ctx, "AX_DELAYED")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		msg, err := delayed.GetLastMsgForSubject(ctx, names.DueSubject("acme", "later"))
		return err == nil && string(msg.Data) == "payload"
	}, 10*time.Second, 50*time.Millisecond, "the moved schedule fires into the tenant's due subject")
	_, err = delayed.GetLastMsgForSubject(ctx, "ax.delayed.later")
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
	_, err = delayed.GetLastMsgForSubject(ctx, "ax.due.later")
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "the old schedule never fires")

	again, err := kv.MigrateKeys(ctx, b.js, names)
	require.NoError(t, err)
	require.Zero(t, again.Moved, "idempotent")
}
