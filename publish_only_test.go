package ax_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A publish-only client works with a producer's permissions alone (here
// producer-acme of the shipped file): it publishes tasks, delayed ones
// with their Ax-Run-At for a worker to defer, writes no record, reports a
// duplicate the bucket de-duplicated, follows the pressure reports the
// leader publishes, and refuses what would read or write records.
func TestPublishOnlyClient(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{Server: natstest.Options{ConfigFile: "docs/ax-permissions.conf"}, User: "scheduler", NoClient: true})
	control := b.JS
	ctx := context.Background()
	_, producer := b.Server.ConnectAs("producer-acme")
	c, err := ax.NewClient(ctx, producer, &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.Nil(t, c.Store())

	info, err := c.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme", ID: "po-1", Priority: ax.P1})
	require.NoError(t, err)
	require.False(t, info.Duplicate)
	require.Equal(t, "AX_P1", info.Stream)
	// A second submit of the id is a message of its own (a token of its
	// own in its Nats-Msg-Id: no other tenant's publish of the id is taken
	// for it); the worker that sees it drops it, the record names the first.
	again, err := c.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme", ID: "po-1", Priority: ax.P1})
	require.NoError(t, err)
	require.False(t, again.Duplicate, "a publish-only client cannot read the record that decides")
	require.NotEqual(t, info.Sequence, again.Sequence)

	runAt := time.Now().Add(time.Hour).UTC()
	later, err := c.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme", ID: "po-later", RunAt: runAt})
	require.NoError(t, err)
	require.Equal(t, "AX_P2", later.Stream, "a delayed task goes to its bucket, for a worker to defer")
	bucket, err := control.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	msg, err := bucket.GetMsg(ctx, later.Sequence)
	require.NoError(t, err)
	require.Equal(t, runAt.Format(time.RFC3339Nano), msg.Header.Get(streams.HeaderRunAt))
	// No Ax-Gen: the message says, as a raw publish does, that no record
	// was written at submit, so the worker creates it at once.
	first, err := control.Stream(ctx, "AX_P1")
	require.NoError(t, err)
	sent, err := first.GetMsg(ctx, info.Sequence)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sent.Header.Get(streams.HeaderMsgID), "po-1:"), sent.Header)
	require.Empty(t, sent.Header.Get(streams.HeaderGen))
	require.Empty(t, msg.Header.Get(streams.HeaderGen))

	infos, err := c.SubmitBatch(ctx, []ax.TaskSpec{{Type: "email", Tenant: "acme", ID: "po-b1"}, {Type: "email", Tenant: "acme", ID: "po-b2"}})
	require.NoError(t, err)
	require.Len(t, infos, 2)

	tasks, err := control.KeyValue(ctx, "AX_TASKS")
	require.NoError(t, err)
	for _, id := range []string{"po-1", "po-later", "po-b1", "po-b2"} {
		_, err := tasks.Get(ctx, kv.Ref{Tenant: "acme", ID: id}.Key())
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "no record for %s: the worker writes it", id)
	}

	require.ErrorIs(t, c.CancelDelayed(ctx, "acme", "po-later"), ax.ErrPublishOnly)
	_, err = c.ListCron(ctx)
	require.ErrorIs(t, err, ax.ErrPublishOnly)

	// A report the leader publishes while P2 refuses non-core tasks.
	report := ax.Pressure{UpdatedAt: time.Now(), ValidFor: time.Minute, Thresholds: ax.DefaultPressureThresholds(),
		Buckets: []ax.BucketPressure{{Stream: "AX_P2", Priority: 2, Msgs: 90, Capacity: 100, Depth: 0.9, Level: ax.LevelRefuse}}}
	data, err := json.Marshal(report)
	require.NoError(t, err)
	require.NoError(t, control.Conn().Publish("ax.events.pressure", data))
	require.Eventually(t, func() bool { return c.Pressure() != nil }, 10*time.Second, 10*time.Millisecond)
	_, err = c.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme"})
	require.ErrorIs(t, err, ax.ErrOverloaded)
}
