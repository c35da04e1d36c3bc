package kv_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestListKeysSeesAKeyBeingUpdated: a key that exists is listed every time,
// while it is being updated (a member renewing its lease, a cron job
// recording its fires). nats.go's watcher-based ListKeys missed it about
// once in 450 lists here.
func TestListKeysSeesAKeyBeingUpdated(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	bucket, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LISTED", History: 1})
	require.NoError(t, err)
	rev, err := bucket.Create(ctx, "cron.job", []byte("v"))
	require.NoError(t, err)
	_, err = bucket.Create(ctx, "other", []byte("v"))
	require.NoError(t, err)
	_, err = bucket.Create(ctx, "cron.gone", []byte("v"))
	require.NoError(t, err)
	require.NoError(t, bucket.Purge(ctx, "cron.gone"))

	done := make(chan error, 1)
	go func() {
		var err error
		for range 3000 {
			if rev, err = bucket.Update(ctx, "cron.job", []byte("v"), rev); err != nil {
				break
			}
		}
		done <- err
	}()
	lists := 0
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			require.Greater(t, lists, 100)
			all, err := kv.ListKeys(ctx, js, "LISTED", "")
			require.NoError(t, err)
			require.Equal(t, []string{"cron.gone", "cron.job", "other"}, all, "a purged key stays listed; Get reports it not found")
			return
		default:
		}
		keys, err := kv.ListKeys(ctx, js, "LISTED", "cron.*")
		require.NoError(t, err)
		require.Contains(t, keys, "cron.job", "list %d", lists)
		lists++
	}
}
