package streams_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// The filters of a bucket's stored tasks match what [streams.Names]
// formats and parses back.
func TestStoredFilters(t *testing.T) {
	t.Parallel()
	names, err := streams.NewNames("orders")
	require.NoError(t, err)
	require.Equal(t, "orders.p2.>", names.StoredFilter(2))
	require.Equal(t, "orders.p2.*.*.resize.>", names.StoredTypeFilter(2, "resize"))
	for _, subject := range []string{names.StoredSubject(2, 7, "acme", "resize", "k"), names.CopySubject(2, "acme", "resize", "k")} {
		stored, err := names.ParseStored(subject)
		require.NoError(t, err)
		require.Equal(t, "resize", stored.Type)
	}
}

// The consumers that deliver a bucket's tasks are its shard consumers, or
// on a pools deployment the consumers of its types, and no other bucket's.
func TestBucketConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("default layout", func(t *testing.T) {
		t.Parallel()
		_, js := natstest.RunServer(t)
		_, err := streams.Provision(ctx, js, nil)
		require.NoError(t, err)
		consumers, err := streams.BucketConsumers(ctx, js, streams.Names{}, 2)
		require.NoError(t, err)
		require.Len(t, consumers, streams.Shards)
		require.Equal(t, "p2-s00", consumers[0])
	})
	t.Run("pools", func(t *testing.T) {
		t.Parallel()
		_, js := natstest.RunServer(t)
		cfg := &streams.Config{Layout: streams.LayoutPools}
		_, err := streams.Provision(ctx, js, cfg)
		require.NoError(t, err)
		_, err = streams.EnsureTypeConsumers(ctx, js, cfg, "email")
		require.NoError(t, err)
		consumers, err := streams.BucketConsumers(ctx, js, streams.Names{}, 2)
		require.NoError(t, err)
		require.Len(t, consumers, streams.Shards)
		require.Contains(t, consumers, streams.Names{}.TypeConsumerName(2, 7, "email"))
		for _, c := range consumers {
			require.True(t, strings.HasPrefix(c, "p2-s"), c)
		}
	})
}
