package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A worker whose server is gone sends no pull requests until it is back:
// a request would only wait in nats.go's reconnect buffer, and a Fetch
// that finds that buffer full leaks its inbox subscription (nats.go
// v1.55.0). Asking again at every missed heartbeat, as the pullers did
// first, grew the connection's subscriptions while the server was away.
func TestPullersWaitWhileTheServerIsAway(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	nc, js := b.Server.Connect(nats.ReconnectBufSize(1024), nats.ReconnectWait(time.Hour))
	reg := worker.NewRegistry()
	require.NoError(t, builtin.Register(reg, nil))
	w, err := worker.New(context.Background(), js, &worker.Config{ID: "A", Registry: reg, Concurrency: 4, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx) // the server is gone: its final writes may fail
	})
	time.Sleep(time.Second) // every puller has its request open
	before := nc.NumSubscriptions()

	b.Server.Stop()
	require.Eventually(t, func() bool { return nc.Status() == nats.RECONNECTING }, 10*time.Second, 50*time.Millisecond)
	time.Sleep(10 * time.Second) // two heartbeats (2 s each) and more, twice
	after := nc.NumSubscriptions()
	t.Logf("subscriptions: %d with the server up, %d after 10 s without it", before, after)
	require.LessOrEqual(t, after, before, "subscriptions while the server is away")
}
