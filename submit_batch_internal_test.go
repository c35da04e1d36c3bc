package ax

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A batch reads each acknowledgement and refusal of its pipelined publishes
// for what it says. A task whose first publish was stored but whose ack was
// lost (the batch's publish is its retry, which the bucket de-duplicates:
// the ack's duplicate flag) reports Duplicate and the first message's
// sequence, and its record names that message. A task whose record exists
// (its id was submitted to another bucket: the record create is refused)
// reports Duplicate, and its second message is deleted. A fresh task beside
// them is stored once and is no duplicate.
func TestSubmitBatchReadsAcksAndRefusals(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	c, err := NewClient(ctx, js, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	earlier, err := c.Submit(ctx, TaskSpec{ID: "b-2", Type: "ship"})
	require.NoError(t, err)

	specs := []TaskSpec{{ID: "b-1", Type: "ship"}, {ID: "b-2", Type: "ship", Priority: P3}, {ID: "b-3", Type: "ship"}}
	tasks := make([]TaskSpec, len(specs))
	msgs := make([]*nats.Msg, len(specs))
	for i, spec := range specs {
		tasks[i], err = spec.normalize(time.Now())
		require.NoError(t, err)
		msgs[i] = tasks[i].message(c.cfg.Names, true)
	}
	first, err := c.js.PublishMsg(ctx, msgs[0]) // b-1's first publish; its ack is "lost"
	require.NoError(t, err)
	require.False(t, first.Duplicate)

	infos := make([]TaskInfo, len(tasks))
	failed := map[int]error{}
	c.storeBatch(ctx, tasks, msgs, infos, failed, true)
	require.Empty(t, failed)

	require.True(t, infos[0].Duplicate, "the retried publish's ack says duplicate")
	require.Equal(t, first.Sequence, infos[0].Sequence)
	rec, _, err := c.store.Get(ctx, kv.Ref{Tenant: DefaultTenant, ID: "b-1"})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, rec.State)
	require.Equal(t, first.Sequence, rec.StreamSeq, "the record names the first message")

	require.True(t, infos[1].Duplicate, "the record create was refused: the task exists")
	require.Equal(t, "AX_P3", infos[1].Stream)
	require.Zero(t, natstest.StreamMsgs(t, js, "AX_P3"), "the second message of b-2 is deleted")
	rec, _, err = c.store.Get(ctx, kv.Ref{Tenant: DefaultTenant, ID: "b-2"})
	require.NoError(t, err)
	require.Equal(t, earlier.Sequence, rec.StreamSeq)
	require.Equal(t, 2, rec.Priority)

	require.False(t, infos[2].Duplicate)
	rec, _, err = c.store.Get(ctx, kv.Ref{Tenant: DefaultTenant, ID: "b-3"})
	require.NoError(t, err)
	require.Equal(t, infos[2].Sequence, rec.StreamSeq)
	require.EqualValues(t, 3, natstest.StreamMsgs(t, js, "AX_P2"))
}
