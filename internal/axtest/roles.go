package axtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// stopTimeout bounds the stop of a worker, a leader or the management API
// at the end of a test.
const stopTimeout = 30 * time.Second

// StartWorker runs a worker with cfg on a connection of its own until the
// test ends, and returns it with that connection. A nil cfg.Registry gets
// the built-in task types (internal/builtin), a nil cfg.Logger the test's
// log. Calling the worker's Stop sooner is fine: the cleanup's Stop then
// returns at once.
func (b *Bundle) StartWorker(t testing.TB, cfg worker.Config) (*worker.Worker, *nats.Conn) {
	t.Helper()
	nc, js := b.Server.Connect()
	if cfg.Registry == nil {
		cfg.Registry = worker.NewRegistry()
		require.NoError(t, builtin.Register(cfg.Registry, nil))
	}
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	w, err := worker.New(context.Background(), js, &cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	return w, nc
}

// Registry returns a registry that serves only taskType, with handle.
func Registry(t testing.TB, taskType string, handle worker.HandlerFunc) *worker.Registry {
	t.Helper()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle(taskType, handle, nil))
	return reg
}

// Leader is a leader started by [Bundle.StartLeader].
type Leader struct {
	*scheduler.Leader
	// NC and JS are the leader's own connection: closing NC is the death
	// of its process.
	NC   *nats.Conn
	JS   jetstream.JetStream
	stop func()
}

// StopRun cancels the leader's Run (a clean stop: it releases the lease)
// and waits for it; calling it again, or letting the test's cleanup call
// it, is fine.
func (l *Leader) StopRun() { l.stop() }

// WaitLeading waits until the leader holds the lease.
func (l *Leader) WaitLeading(t testing.TB) {
	t.Helper()
	require.Eventually(t, l.Leading, 10*time.Second, 5*time.Millisecond, "the leader never took the lease")
}

// StartLeader runs the scheduler's leader loops with cfg on a connection of
// its own (opened with opts) until the test ends (or [Leader.StopRun]). A zero cfg.LeaseTTL is
// 2s, so that a stopped leader's successor leads soon; a nil cfg.Logger is
// the test's log. It does not wait for the lease: see [Leader.WaitLeading].
func (b *Bundle) StartLeader(t testing.TB, cfg scheduler.Config, opts ...nats.Option) *Leader {
	t.Helper()
	nc, js := b.Server.Connect(opts...)
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	l, err := scheduler.New(context.Background(), js, &cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &Leader{Leader: l, NC: nc, JS: js, stop: stop}
}

// StartAdmin runs the management API with cfg (nil: the defaults, with the
// test's log) on the bundle's connection until the test ends, and returns
// a client of it.
func (b *Bundle) StartAdmin(t testing.TB, cfg *admin.Config) *admin.Client {
	t.Helper()
	if cfg == nil {
		cfg = &admin.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	ctx := context.Background()
	svc, err := admin.New(ctx, b.JS, cfg)
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	return admin.NewClient(b.NC, cfg.Names)
}

// AllShards lists every shard, for a worker with fixed shards that serves
// them all.
func AllShards() []int {
	out := make([]int, streams.Shards)
	for i := range out {
		out[i] = i
	}
	return out
}

// Stop stops s (a worker, the management API) within a bound, failing the
// test if it cannot: for a test that stops one before its end.
func Stop(t testing.TB, s interface{ Stop(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
}
