package ax_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/stretchr/testify/require"
)

// Client.Get reads a task's record under its public name, ax.Record; an
// unknown task is ErrNotFound and a publish-only client may not read.
func TestClientGet(t *testing.T) {
	t.Parallel()
	b := axtest.Fast(t)
	ctx := context.Background()
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme", Priority: ax.P1})
	require.NoError(t, err)
	var rec *ax.Record
	rec, err = b.Client.Get(ctx, "acme", info.ID)
	require.NoError(t, err)
	require.Equal(t, ax.Ref{Tenant: "acme", ID: info.ID}, rec.Ref())
	require.Equal(t, "READY", string(rec.State))
	require.Equal(t, 1, rec.Priority)

	_, err = b.Client.Get(ctx, "", "nope")
	require.ErrorIs(t, err, ax.ErrNotFound)

	_, js := b.Connect()
	producer, err := ax.NewClient(ctx, js, &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	_, err = producer.Get(ctx, "acme", info.ID)
	require.ErrorIs(t, err, ax.ErrPublishOnly)
}
