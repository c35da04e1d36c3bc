package scheduler_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// BenchmarkDelayedLateness submits 10,000 delayed tasks due at random
// times within one minute and measures how late each landed in its bucket
// (stored time minus Ax-Run-At): p50, p99 and max. It takes about 70 s
// (AX_LATENESS_WINDOW=20s shortens the window) and is skipped with -short.
//
//	go test ./scheduler -run '^$' -bench DelayedLateness -benchtime 1x
func BenchmarkDelayedLateness(b *testing.B) {
	if testing.Short() {
		b.Skip("long benchmark")
	}
	window := time.Minute
	if v := os.Getenv("AX_LATENESS_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(b, err)
		window = d
	}
	const tasks = 10_000
	const lead = 10 * time.Second // submitting takes a few seconds
	for b.Loop() {
		srv := natstest.Start(b, natstest.Options{})
		_, js := srv.Connect()
		natstest.Provision(b, js, nil)
		_, ljs := srv.Connect()
		l, err := scheduler.New(context.Background(), ljs, &scheduler.Config{Logger: zap.NewNop(), AgingThreshold: -1})
		require.NoError(b, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(ctx) }()
		var early time.Duration // AX_EARLY: how early schedules fire (default 1s)
		if v := os.Getenv("AX_EARLY"); v != "" {
			early, err = time.ParseDuration(v)
			require.NoError(b, err)
		}
		client, err := ax.NewClient(ctx, js, &ax.Config{Early: early})
		require.NoError(b, err)

		start := time.Now().Add(lead)
		var wg sync.WaitGroup
		const submitters = 8
		for s := range submitters {
			wg.Go(func() {
				for i := s; i < tasks; i += submitters {
					runAt := start.Add(time.Duration(rand.Int64N(int64(window - lead))))
					if _, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P1, RunAt: runAt}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.Logf("submitted %d in %s", tasks, time.Since(start.Add(-lead)))
		require.Eventually(b, func() bool { return natstest.StreamMsgs(b, js, "AX_P1") == tasks }, window+time.Minute, 100*time.Millisecond)
		stream, err := js.Stream(ctx, "AX_P1")
		require.NoError(b, err)
		// late: stored in the bucket minus run time; woke: the mover's
		// publish (Ax-Released-At) minus run time, to tell timer lag from
		// publish latency.
		late := make([]time.Duration, 0, tasks)
		woke := make([]time.Duration, 0, tasks)
		immediate := 0 // due before their submit ended (a slow machine): not delayed
		for seq := uint64(1); len(late)+immediate < tasks; seq++ {
			msg, err := stream.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			if msg.Header.Get(streams.HeaderRunAt) == "" {
				immediate++
				continue
			}
			runAt, err := time.Parse(time.RFC3339Nano, msg.Header.Get(streams.HeaderRunAt))
			require.NoError(b, err)
			released, err := time.Parse(time.RFC3339Nano, msg.Header.Get(streams.HeaderReleasedAt))
			require.NoError(b, err)
			late = append(late, msg.Time.Sub(runAt))
			woke = append(woke, released.Sub(runAt))
		}
		slices.Sort(late)
		slices.Sort(woke)
		pct := func(d []time.Duration, p float64) float64 {
			return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(late, 0.50), "p50-ms")
		b.ReportMetric(pct(late, 0.99), "p99-ms")
		b.ReportMetric(pct(late, 1), "max-ms")
		b.ReportMetric(pct(late, 0), "min-ms")
		b.ReportMetric(pct(woke, 0.99), "wake-p99-ms")
		b.ReportMetric(float64(immediate), "immediate")
		_ = client.Close()
		cancel()
		<-done
	}
}

// BenchmarkLeaderFailover kills the leader's connection and measures the
// time until the other contender leads, with a 2 s lease TTL.
//
//	go test ./scheduler -run '^$' -bench LeaderFailover -benchtime 5x
func BenchmarkLeaderFailover(b *testing.B) {
	const ttl = 2 * time.Second
	srv := natstest.Start(b, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(b, js, nil)
	var took []time.Duration
	for b.Loop() {
		var cs []*benchContender
		for range 2 {
			cs = append(cs, startBenchContender(b, srv, ttl))
		}
		var leader, other *benchContender
		require.Eventually(b, func() bool {
			if cs[0].l.Leading() != cs[1].l.Leading() {
				leader, other = cs[0], cs[1]
				if cs[1].l.Leading() {
					leader, other = cs[1], cs[0]
				}
				return true
			}
			return false
		}, 30*time.Second, time.Millisecond)
		killed := time.Now()
		leader.nc.Close()
		require.Eventually(b, other.l.Leading, 5*ttl, time.Millisecond)
		took = append(took, time.Since(killed))
		for _, c := range cs {
			c.cancel()
			<-c.done
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "median-ms")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
	b.ReportMetric(ttl.Seconds()*1000, "ttl-ms")
}

type benchContender struct {
	nc     *nats.Conn
	l      *scheduler.Leader
	cancel context.CancelFunc
	done   chan struct{}
}

func startBenchContender(b *testing.B, srv *natstest.Server, ttl time.Duration) *benchContender {
	nc, js := srv.Connect(nats.MaxReconnects(0))
	l, err := scheduler.New(context.Background(), js, &scheduler.Config{LeaseTTL: ttl, RenewEvery: ttl / 4, Logger: zap.NewNop()})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	c := &benchContender{nc: nc, l: l, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(c.done); _ = l.Run(ctx) }()
	return c
}
