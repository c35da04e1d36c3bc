package scheduler_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// contender is one scheduler process: its own connection and leader.
type contender struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	leader *scheduler.Leader
	cancel context.CancelFunc
	done   chan struct{}
}

// startContender connects to srv and runs a leader on that connection.
func startContender(t *testing.T, srv *natstest.Server, cfg scheduler.Config) *contender {
	t.Helper()
	nc, js := srv.Connect(nats.MaxReconnects(0))
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	cfg.LeaseTTL = cmpOr(cfg.LeaseTTL, 2*time.Second)
	cfg.RenewEvery = cmpOr(cfg.RenewEvery, 500*time.Millisecond)
	l, err := scheduler.New(context.Background(), js, &cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c := &contender{nc: nc, js: js, leader: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(c.stop)
	return c
}

// stop ends the contender's Run and waits for it.
func (c *contender) stop() {
	c.cancel()
	<-c.done
}

// kill closes the contender's connection, as if its process died.
func (c *contender) kill() { c.nc.Close() }

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// waitLeader waits until exactly one of cs leads and returns it.
func waitLeader(t *testing.T, cs ...*contender) *contender {
	t.Helper()
	var leader *contender
	require.Eventually(t, func() bool {
		leader = nil
		n := 0
		for _, c := range cs {
			if c.leader.Leading() {
				leader, n = c, n+1
			}
		}
		return n == 1
	}, 30*time.Second, 5*time.Millisecond)
	return leader
}

// loopsBundle is a server with running contenders and a client.
type loopsBundle struct {
	srv        *natstest.Server
	js         jetstream.JetStream
	client     *ax.Client
	contenders []*contender
	leader     *contender // the first leader
}

// setupLoops starts n contenders with cfg and waits for a leader.
func setupLoops(t *testing.T, n int, scfg *streams.Config, cfg scheduler.Config) *loopsBundle {
	t.Helper()
	b := &loopsBundle{srv: newServer(t, scfg)}
	for range n {
		b.contenders = append(b.contenders, startContender(t, b.srv, cfg))
	}
	b.leader = waitLeader(t, b.contenders...)
	_, b.js = b.srv.Connect()
	b.client = newClient(t, b.js, nil)
	return b
}

// follower returns a contender that is not the first leader.
func (b *loopsBundle) follower() *contender {
	for _, c := range b.contenders {
		if c != b.leader {
			return c
		}
	}
	return nil
}

func newServer(t *testing.T, cfg *streams.Config) *natstest.Server {
	t.Helper()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, cfg)
	return srv
}

// Kill the leader's connection: the other contender leads within the TTL
// (plus the server's expiry tick), and the two never lead at once.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ttl = 2 * time.Second
	a := startContender(t, srv, scheduler.Config{LeaseTTL: ttl})
	b := startContender(t, srv, scheduler.Config{LeaseTTL: ttl})
	var both atomic.Int32
	var mu sync.Mutex // guards all
	all := []*contender{a, b}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			mu.Lock()
			n := 0
			for _, c := range all {
				if c.leader.Leading() {
					n++
				}
			}
			mu.Unlock()
			if n > 1 {
				both.Add(1)
			}
		}
	})
	for round := range 2 {
		first := waitLeader(t, a, b)
		other := a
		if first == a {
			other = b
		}
		killed := time.Now()
		if round == 0 {
			first.kill() // a dead process: its lease expires
		} else {
			first.stop() // a clean stop: it releases the lease
		}
		require.Eventually(t, other.leader.Leading, 3*ttl, time.Millisecond)
		t.Logf("round %d: new leader after %s (TTL %s)", round, time.Since(killed), ttl)
		if round == 0 {
			// The killed process comes back as a new contender.
			revived := startContender(t, srv, scheduler.Config{LeaseTTL: ttl})
			mu.Lock()
			all = append(all, revived)
			mu.Unlock()
			if first == a {
				a = revived
			} else {
				b = revived
			}
		}
	}
	close(stop)
	wg.Wait()
	require.Zero(t, both.Load(), "two leaders at once")
}

// Start runs a leader in the background and Stop ends it: its loops stop,
// its lease is released (another contender leads well within the lease's
// TTL) and a second Stop returns at once.
func TestLeaderStartStop(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ttl = 5 * time.Second
	_, js := srv.Connect()
	l, err := scheduler.New(context.Background(), js, &scheduler.Config{LeaseTTL: ttl})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, l.Start(ctx))
	require.Error(t, l.Start(ctx), "a leader starts once")
	require.Eventually(t, l.Leading, 10*time.Second, 5*time.Millisecond)
	other := startContender(t, srv, scheduler.Config{LeaseTTL: ttl})

	stopped := time.Now()
	require.NoError(t, l.Stop(ctx))
	require.False(t, l.Leading())
	require.Eventually(t, other.leader.Leading, ttl, 5*time.Millisecond)
	require.Less(t, time.Since(stopped), ttl, "the lease was released, not left to expire")
	require.NoError(t, l.Stop(ctx))
}
