package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// load is one benchmark run: workers in this process on one embedded
// server, tasks published while they run.
type load struct {
	policy      string        // priority policy of the shard consumers
	workers     int           // workers in the process
	concurrency int           // slots per worker
	work        time.Duration // handler time (0: no-op)
	keys        func(i int) string
	rate        int // tasks published per second; 0: as fast as possible
}

type loadResult struct {
	tasksPerSec float64
	p50, p99    time.Duration // start latency: stored in the stream -> handler start
	perWorker   []int64
}

func runLoad(b *testing.B, l load, n int) loadResult {
	b.Helper()
	srv := natstest.Start(b, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(b, js, &streams.Config{PriorityPolicy: l.policy})
	ctx := context.Background()

	var mu sync.Mutex
	latencies := make([]time.Duration, 0, n)
	done := make(chan struct{})
	reg := worker.NewRegistry()
	require.NoError(b, reg.Handle("noop", func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		latencies = append(latencies, time.Since(task.EnqueuedAt))
		if len(latencies) == n {
			close(done)
		}
		mu.Unlock()
		if l.work > 0 {
			select {
			case <-time.After(l.work):
			case <-ctx.Done():
			}
		}
		return nil
	}, nil))
	var ws []*worker.Worker
	var ids []string
	for i := range l.workers {
		_, wjs := srv.Connect()
		id := fmt.Sprintf("w%d", i)
		w, err := worker.New(ctx, wjs, &worker.Config{ID: id, Registry: reg, Concurrency: l.concurrency, Logger: zap.NewNop()})
		require.NoError(b, err)
		require.NoError(b, w.Start(ctx))
		ws = append(ws, w)
		ids = append(ids, id)
	}
	defer func() {
		for _, w := range ws {
			require.NoError(b, w.Stop(ctx))
		}
	}()
	waitSplit(b, js, ids)

	_, pjs := srv.Connect()
	b.ResetTimer()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		if l.rate > 0 && i > 0 && i%(l.rate/100) == 0 {
			<-tick.C // rate/100 tasks every 10ms
		}
		subject := fmt.Sprintf("ax.submit.p2.t.noop.%s", l.keys(i))
		_, err := pjs.PublishAsync(subject, nil)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			<-pjs.PublishAsyncComplete() // the server is behind: let it catch up
			_, err = pjs.PublishAsync(subject, nil)
		}
		require.NoError(b, err)
	}
	<-pjs.PublishAsyncComplete()
	<-done
	elapsed := time.Since(start)
	b.StopTimer()

	res := loadResult{tasksPerSec: float64(n) / elapsed.Seconds()}
	mu.Lock()
	slices.Sort(latencies)
	res.p50, res.p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	mu.Unlock()
	for _, w := range ws {
		res.perWorker = append(res.perWorker, w.Stats().Started)
	}
	return res
}

// waitSplit waits until the workers announce a balanced split of the shards.
func waitSplit(b *testing.B, js jetstream.JetStream, ids []string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ms, err := kv.ListMembers(context.Background(), js, streams.Names{})
		if err == nil && len(ms) == len(ids) {
			total, balanced := 0, true
			for _, m := range ms {
				total += len(m.Shards)
				balanced = balanced && len(m.Shards) <= (streams.Shards+len(ids)-1)/len(ids)
			}
			if total == streams.Shards && balanced {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("workers %v never split the shards", ids)
}

func (r loadResult) report(b *testing.B) {
	b.ReportMetric(r.tasksPerSec, "tasks/s")
	b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-start-ms")
	b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-start-ms")
}

// BenchmarkMesh runs no-op tasks through 1, 2 and 4 workers of 16 slots in
// one process, published while they run: as fast as possible (throughput;
// the start latency is then queueing) and at 2,000 tasks/s (start latency
// below saturation).
func BenchmarkMesh(b *testing.B) {
	for _, rate := range []int{0, 2000} {
		for _, workers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("rate=%d/workers=%d", rate, workers), func(b *testing.B) {
				res := runLoad(b, load{workers: workers, concurrency: 16, rate: rate,
					keys: func(i int) string { return fmt.Sprintf("k%d", i) }}, max(b.N, 1000))
				res.report(b)
			})
		}
	}
}

// BenchmarkSkew compares the priority policies on a skewed load: half the
// tasks share one key (one shard), 4 workers of 8 slots, 10 ms tasks.
// pinned_client and none leave the hot shard to its owner; overflow lets
// idle workers steal its backlog.
func BenchmarkSkew(b *testing.B) {
	for _, policy := range []string{"pinned_client", "overflow", "none"} {
		b.Run("policy="+policy, func(b *testing.B) {
			res := runLoad(b, load{policy: policy, workers: 4, concurrency: 8, work: 10 * time.Millisecond,
				keys: func(i int) string {
					if i%2 == 0 {
						return "hot"
					}
					return fmt.Sprintf("k%d", i)
				}}, max(b.N, 1000))
			res.report(b)
			slices.Sort(res.perWorker)
			b.ReportMetric(float64(res.perWorker[len(res.perWorker)-1])/float64(max(b.N, 1000)), "busiest-share")
		})
	}
}
