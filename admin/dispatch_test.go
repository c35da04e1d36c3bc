package admin_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// A move into a full bucket is refused with a 409 that says to retry, and
// changes nothing: the task keeps its priority, generation and message.
func TestAdminReprioritizeIntoAFullBucket(t *testing.T) {
	t.Parallel()
	b := setupAdminWith(t, axtest.Options{Streams: &streams.Config{Capacity: 2}})
	ctx := context.Background()
	id := b.Submit(t, ax.TaskSpec{ID: "moved", Type: "email", Priority: ax.P4}) // recorded at submit
	b.Submit(t, ax.TaskSpec{Type: "email", Priority: ax.P0})
	b.Submit(t, ax.TaskSpec{Type: "email", Priority: ax.P0})

	err := b.call(t, admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: 0}, nil)
	requireCode(t, err, 409, "bucket AX_P0 is full (")
	require.ErrorContains(t, err, "retry when it drains")
	rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
	require.NoError(t, err)
	require.Equal(t, 4, rec.Priority)
	require.EqualValues(t, 1, rec.Gen)
	require.Equal(t, "AX_P4", rec.Stream)
	require.EqualValues(t, 2, natstest.StreamMsgs(t, b.JS, "AX_P0"))
	require.EqualValues(t, 1, natstest.StreamMsgs(t, b.JS, "AX_P4"))
}
