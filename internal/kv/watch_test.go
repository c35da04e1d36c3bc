package kv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestStopWatchEndsAFullWatcher leaves a watcher unread until nats.go's
// channel of updates (256) is full and its subscription's goroutine blocks
// handing over the next one, then stops it. With the watcher's own Stop
// the goroutine stays blocked and the channel is never closed; StopWatch
// ends both.
func TestStopWatchEndsAFullWatcher(t *testing.T) {
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	bucket, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "WATCHED"})
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()

	w, err := bucket.WatchAll(ctx)
	require.NoError(t, err)
	for i := range 300 {
		_, err := bucket.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(w.Updates()) == cap(w.Updates()) }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, kv.StopWatch(w))
	select {
	case _, ok := <-w.Updates():
		require.False(t, ok, "the updates channel is closed")
	case <-time.After(time.Second):
		t.Fatal("the updates channel is still open")
	}
	goleak.VerifyNone(t, before)
}
