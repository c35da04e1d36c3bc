package ax_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A submit whose acknowledgement cannot be read (here the producer's reply
// inbox is one the server refuses it) was published: Submit says so with
// ax.ErrMaybeStored, and the task is stored. A submit no stream answers
// (nothing captures the subject) is not stored, and does not say "maybe".
func TestSubmitMaybeStored(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{Server: natstest.Options{ConfigFile: "docs/ax-permissions.conf"}, User: "scheduler", NoClient: true})
	control := b.JS
	ctx := context.Background()
	_, producer := b.Server.ConnectAs("producer-acme", nats.CustomInboxPrefix("_INBOX.service")) // an inbox it may not subscribe to
	c, err := ax.NewClient(ctx, producer, &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	submitCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.Submit(submitCtx, ax.TaskSpec{Type: "email", Tenant: "acme", ID: "lost-ack", Priority: ax.P1})
	require.ErrorIs(t, err, ax.ErrMaybeStored)
	require.ErrorContains(t, err, "submit task lost-ack: published; its acknowledgement could not be read")
	stream, err := control.Stream(ctx, "AX_P1")
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := stream.Info(ctx)
		if assert.NoError(c, err) {
			assert.Equal(c, uint64(1), info.State.Msgs, "the task is stored")
		}
	}, 5*time.Second, 20*time.Millisecond)

	_, js := natstest.RunServer(t) // no stream captures a submit
	bare, err := ax.NewClient(ctx, js, &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bare.Close() })
	_, err = bare.Submit(ctx, ax.TaskSpec{Type: "email", ID: "nowhere"})
	require.Error(t, err)
	require.False(t, errors.Is(err, ax.ErrMaybeStored), "not stored: %v", err)
}
