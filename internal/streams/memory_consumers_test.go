package streams_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// MemoryConsumers provisions the shard consumers with their state in the
// server's memory, and a provision that asks for the other storage is
// refused with a message that says what to do, changing nothing (the
// server cannot switch a consumer's storage).
func TestMemoryConsumersProvisioning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		first, later bool
		wantInError  string
	}{
		{name: "file, then memory", first: false, later: true, wantInError: "keeps its state in a file, want memory, and the server cannot switch it: provision without --memory-consumers to keep it"},
		{name: "memory, then file", first: true, later: false, wantInError: "keeps its state in memory, want a file, and the server cannot switch it: provision with --memory-consumers to keep it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, js := natstest.RunServer(t)
			_, err := streams.Provision(ctx, js, &streams.Config{Capacity: 1000, MemoryConsumers: tc.first})
			require.NoError(t, err)
			again, err := streams.Provision(ctx, js, &streams.Config{Capacity: 1000, MemoryConsumers: tc.first})
			require.NoError(t, err)
			require.Empty(t, again.Created)
			require.Empty(t, again.Updated)
			names := streams.DefaultNames()
			for p := range streams.Priorities {
				for shard := range streams.Shards {
					cons, err := js.Consumer(ctx, names.PriorityStream(p), names.ConsumerName(p, shard))
					require.NoError(t, err)
					require.Equal(t, tc.first, cons.CachedInfo().Config.MemoryStorage, "P%d shard %d", p, shard)
				}
			}

			_, err = streams.Provision(ctx, js, &streams.Config{Capacity: 1000, MemoryConsumers: tc.later})
			require.True(t, errors.Is(err, streams.ErrImmutable), "%v", err)
			require.ErrorContains(t, err, "consumer AX_P0/p0-s00 "+tc.wantInError)
			require.ErrorContains(t, err, "nats consumer rm AX_P0 p0-s00")
			cons, err := js.Consumer(ctx, "AX_P0", "p0-s00")
			require.NoError(t, err)
			require.Equal(t, tc.first, cons.CachedInfo().Config.MemoryStorage, "the refused provision changed the consumer")
		})
	}
}

// Memory-stored consumers are for the shared layout's shard consumers: a
// routed layout's consumers are made by workers and the leader from the
// buckets' metadata, which does not carry the choice.
func TestMemoryConsumersRefusedForRoutedLayouts(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	for _, layout := range []streams.Layout{streams.LayoutPools, streams.LayoutFair} {
		_, err := streams.Provision(context.Background(), js, &streams.Config{Layout: layout, MemoryConsumers: true})
		require.ErrorContains(t, err, "MemoryConsumers is for the shared layout's shard consumers, not layout "+layout.String())
	}
	lister := js.StreamNames(context.Background())
	for name := range lister.Name() {
		t.Fatalf("a refused provision created stream %s", name)
	}
	require.NoError(t, lister.Err())
}
