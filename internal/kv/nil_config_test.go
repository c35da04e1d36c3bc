package kv_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// TestNilConfigs: Provision with a nil config creates the default buckets,
// NewLease with a nil config is refused with an error (not a panic), and a
// zero Names is the default deployment's.
func TestNilConfigs(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	require.NotPanics(t, func() { require.NoError(t, kv.Provision(ctx, js, nil)) })
	for _, bucket := range []string{"AX_TASKS", "AX_LOCKS", "AX_WORKERS", "AX_CONTROL"} {
		_, err := js.KeyValue(ctx, bucket)
		require.NoError(t, err, bucket)
	}
	require.NotPanics(t, func() {
		_, err := kv.NewLease(ctx, js, nil)
		require.ErrorContains(t, err, "Bucket, Key and Holder are required")
	})
	store, err := kv.NewStore(ctx, js, nil)
	require.NoError(t, err)
	require.NotNil(t, store)
	members, err := kv.ListMembers(ctx, js, streams.Names{})
	require.NoError(t, err)
	require.Empty(t, members)
}
