package scheduler_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// startContender runs a leader with cfg on a connection of its own to d,
// which never reconnects (closing it is the death of the process), and
// renews its lease every 500ms unless cfg says otherwise.
func startContender(t *testing.T, d *axtest.Bundle, cfg scheduler.Config) *axtest.Leader {
	t.Helper()
	cfg.RenewEvery = cmpOr(cfg.RenewEvery, 500*time.Millisecond)
	return d.StartLeader(t, cfg, nats.MaxReconnects(0))
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// waitLeader waits until exactly one of cs leads and returns it.
func waitLeader(t *testing.T, cs ...*axtest.Leader) *axtest.Leader {
	t.Helper()
	var leader *axtest.Leader
	require.Eventually(t, func() bool {
		leader = nil
		n := 0
		for _, c := range cs {
			if c.Leading() {
				leader, n = c, n+1
			}
		}
		return n == 1
	}, 30*time.Second, 5*time.Millisecond)
	return leader
}

// loopsBundle is a deployment with running contenders and a client.
type loopsBundle struct {
	*axtest.Bundle
	contenders []*axtest.Leader
	leader     *axtest.Leader // the first leader
}

// setupLoops starts n contenders with cfg and waits for a leader.
func setupLoops(t *testing.T, n int, scfg *streams.Config, cfg scheduler.Config) *loopsBundle {
	t.Helper()
	b := &loopsBundle{Bundle: axtest.Setup(t, axtest.Options{Streams: scfg})}
	for range n {
		b.contenders = append(b.contenders, startContender(t, b.Bundle, cfg))
	}
	b.leader = waitLeader(t, b.contenders...)
	return b
}

// follower returns a contender that is not the first leader.
func (b *loopsBundle) follower() *axtest.Leader {
	for _, c := range b.contenders {
		if c != b.leader {
			return c
		}
	}
	return nil
}

// Kill the leader's connection: the other contender leads within the TTL
// (plus the server's expiry tick), and the two never lead at once.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	dep := axtest.Setup(t, axtest.Options{})
	const ttl = 2 * time.Second
	a := startContender(t, dep, scheduler.Config{LeaseTTL: ttl})
	b := startContender(t, dep, scheduler.Config{LeaseTTL: ttl})
	var both atomic.Int32
	var mu sync.Mutex // guards all
	all := []*axtest.Leader{a, b}
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
				if c.Leading() {
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
			first.NC.Close() // a dead process: its lease expires
		} else {
			first.StopRun() // a clean stop: it releases the lease
		}
		require.Eventually(t, other.Leading, 3*ttl, time.Millisecond)
		t.Logf("round %d: new leader after %s (TTL %s)", round, time.Since(killed), ttl)
		if round == 0 {
			// The killed process comes back as a new contender.
			revived := startContender(t, dep, scheduler.Config{LeaseTTL: ttl})
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
	dep := axtest.Setup(t, axtest.Options{})
	const ttl = 5 * time.Second
	_, js := dep.Connect()
	l, err := scheduler.New(context.Background(), js, &scheduler.Config{LeaseTTL: ttl})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, l.Start(ctx))
	require.Error(t, l.Start(ctx), "a leader starts once")
	require.Eventually(t, l.Leading, 10*time.Second, 5*time.Millisecond)
	other := startContender(t, dep, scheduler.Config{LeaseTTL: ttl})

	stopped := time.Now()
	require.NoError(t, l.Stop(ctx))
	require.False(t, l.Leading())
	require.Eventually(t, other.Leading, ttl, 5*time.Millisecond)
	require.Less(t, time.Since(stopped), ttl, "the lease was released, not left to expire")
	require.NoError(t, l.Stop(ctx))
}
