package axtest

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ax-mesh/ax/internal/streams"
)

// BucketTaskIDs returns the ids of the tasks whose messages wait in the
// priority buckets. The leader releases a workflow's task without a record
// (the worker's claim writes it), so a released task no worker has claimed
// is a message only. It reads every message of the buckets: for tests'
// small ones. t may be the collector of an EventuallyWithT condition.
func BucketTaskIDs(t require.TestingT, ctx context.Context, js jetstream.JetStream) map[string]bool {
	ids := map[string]bool{}
	for p := range streams.Priorities {
		stream, err := js.Stream(ctx, streams.DefaultNames().PriorityStream(p))
		require.NoError(t, err)
		state := stream.CachedInfo().State
		for seq := state.FirstSeq; seq > 0 && seq <= state.LastSeq; seq++ {
			msg, err := stream.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			require.NoError(t, err)
			if _, opts, err := streams.DefaultNames().ParseMessage(msg.Subject, msg.Header); err == nil {
				ids[opts.ID] = true
			}
		}
	}
	return ids
}

// BucketMessages counts the messages waiting in the priority buckets.
func BucketMessages(t require.TestingT, ctx context.Context, js jetstream.JetStream) uint64 {
	var n uint64
	for p := range streams.Priorities {
		stream, err := js.Stream(ctx, streams.DefaultNames().PriorityStream(p))
		require.NoError(t, err)
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		n += info.State.Msgs
	}
	return n
}
