package kv_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// TestScanSeesARecordBeingUpdated: a record that exists when a scan starts
// is visited, also while it is being updated (a task moving while an
// operator's batch cancel scans). nats.go's watcher marked the end of the
// current values before it in about 1 scan in 5 here.
func TestScanSeesARecordBeingUpdated(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	bucket, err := b.js.KeyValue(ctx, "AX_TASKS")
	require.NoError(t, err)
	for i := range 200 {
		_, err := bucket.Create(ctx, fmt.Sprintf("t.t%03d", i), fmt.Appendf(nil, `{"id":"t%03d","tenant":"t"}`, i))
		require.NoError(t, err)
	}
	rev, err := bucket.Create(ctx, "t.hot", []byte(`{"id":"hot","tenant":"t"}`))
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		var err error
		for range 3000 {
			if rev, err = bucket.Update(ctx, "t.hot", []byte(`{"id":"hot","tenant":"t"}`), rev); err != nil {
				break
			}
		}
		done <- err
	}()
	for scans := 0; ; scans++ {
		select {
		case err := <-done:
			require.NoError(t, err)
			require.Greater(t, scans, 20)
			return
		default:
		}
		visited, hot := 0, 0
		require.NoError(t, b.store.Scan(ctx, func(rec *kv.Record, _ uint64) error {
			visited++
			if rec.ID == "hot" {
				hot++
			}
			return nil
		}, func(e *kv.UnreadableError) { t.Errorf("unreadable: %v", e) }))
		require.Equal(t, 1, hot, "scan %d", scans)
		require.Equal(t, 201, visited, "scan %d", scans)
	}
}
