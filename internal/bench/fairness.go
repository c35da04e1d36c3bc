package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// The tenants of the fairness scenario.
const (
	// FairBulk is the tenant with the backlog.
	FairBulk = "bulk"
	// FairPaced is the tenant that submits at a steady rate.
	FairPaced = "paced"
	// fairBatch is the size of a submit batch of the backlog.
	fairBatch = 500
)

// FairnessOptions shape the fairness scenario.
type FairnessOptions struct {
	// Rate is the paced tenant's (or key's) submits per second.
	Rate int
	// Shared runs it on a deployment without fair shares (one catch-all
	// consumer per shard), for comparison.
	Shared bool
	// ByKey runs it between two partition keys of one tenant on a
	// deployment without fair shares: the backlog's tasks all have the key
	// FairBulk (one shard), the paced ones a key of another shard.
	ByKey bool
	// Hold is how long a task of the backlog runs (its handler sleeps; 0:
	// a no-op). Fair shares matter where the slots, not the pulls, are
	// what the backlog waits for.
	Hold time.Duration
}

// fairPacedKey returns the paced key of a ByKey run: FairPaced, or a
// variant of it on another shard than FairBulk.
func fairPacedKey() string {
	key := FairPaced
	for i := 0; streams.Shard(key) == streams.Shard(FairBulk); i++ {
		key = fmt.Sprintf("%s-%d", FairPaced, i)
	}
	return key
}

// Fairness measures fair shares between tenants at one priority. Tenant
// FairBulk submits o.Tasks no-op tasks while no worker runs; then o.Workers
// workers of o.Concurrency slots start and drain them. It does this twice:
// alone, and with tenant FairPaced submitting one task every 1/rate s
// while the backlog drains. It reports the backlog's drain rate alone and
// beside the paced tenant (and their ratio), and the paced tenant's
// submit-to-start latency (p50, p99, max), counted by the handler. The
// drain is timed from the backlog's first start (the workers' start, which
// binds a consumer per tenant, priority and shard, is left out); the CPU
// per task counts from before the workers start. shared
// runs it on a deployment without fair shares (one catch-all consumer per
// shard), for comparison. As the other scenarios, it runs no leader: the
// tenants' consumers are made up front (streams.Config.Tenants), and the
// leader's copy of each submit, with which it finds new tenants, is not
// counted (admin's BenchmarkRejectWatchCost prices such a subscription).
//
// With fo.ByKey the two are partition keys of one tenant on a deployment
// without fair shares, where a worker's shards take turns.
func Fairness(ctx context.Context, o Options, fo FairnessOptions) ([]*Result, error) {
	if fo.Rate <= 0 {
		return nil, fmt.Errorf("fairness: --rate must be positive")
	}
	if fo.Hold < 0 {
		return nil, fmt.Errorf("fairness: --fair-hold must not be negative")
	}
	prefix := "axfair"
	switch {
	case fo.ByKey:
		prefix = "axfairkey"
	case fo.Shared:
		prefix = "axfairshared"
	default:
		o.Layout, o.FairTenants = streams.LayoutFair, []string{FairBulk, FairPaced}
	}
	e, err := newEnv(ctx, o, prefix, int64(o.Tasks)+100_000)
	if err != nil {
		return nil, err
	}
	client, err := ax.NewClient(ctx, e.js, &ax.Config{Names: e.names})
	if err != nil {
		e.close()
		return nil, err
	}
	r := &run{env: e, client: client}
	defer r.close()
	// The paced tenant submits on a connection of its own, as a service of
	// its own would: on the workers' connection its submits would queue
	// behind their traffic in the client.
	pacedNC, err := nats.Connect(e.nc.ConnectedUrl(), e.connectOpts...)
	if err != nil {
		return nil, fmt.Errorf("fairness: connect: %w", err)
	}
	defer pacedNC.Close()
	pacedJS, err := jetstream.New(pacedNC)
	if err != nil {
		return nil, err
	}
	paced, err := ax.NewClient(ctx, pacedJS, &ax.Config{Names: e.names})
	if err != nil {
		return nil, err
	}
	defer func() { _ = paced.Close() }()
	layout := "fair"
	switch {
	case fo.ByKey:
		layout = "keys"
	case fo.Shared:
		layout = "shared"
	}
	alone, err := r.fairPhase(ctx, o, paced, fo, 0)
	if err != nil {
		return nil, err
	}
	alone.Scenario = "fairness-alone-" + layout
	beside, err := r.fairPhase(ctx, o, paced, fo, fo.Rate)
	if err != nil {
		return nil, err
	}
	beside.Scenario = "fairness-" + layout
	beside.Extra["bulk_ratio_to_alone"] = beside.CompletePerSec / alone.CompletePerSec
	return []*Result{alone, beside}, nil
}

// fairPhase submits the backlog, starts the workers, drains it (with the
// paced tenant or key beside it if rate > 0) and stops the workers.
func (r *run) fairPhase(ctx context.Context, o Options, paced *ax.Client, fo FairnessOptions, rate int) (*Result, error) {
	var bulkDone, pacedDone counter
	var lat latencies
	var firstMu sync.Mutex
	var first time.Time // the backlog's first start: the drain is timed from there
	bulkSpec := ax.TaskSpec{Type: "job", Tenant: FairBulk, Priority: ax.P2}
	pacedSpec := ax.TaskSpec{Type: "job", Tenant: FairPaced, Priority: ax.P2}
	if fo.ByKey {
		bulkSpec = ax.TaskSpec{Type: "job", Key: FairBulk, Priority: ax.P2}
		pacedSpec = ax.TaskSpec{Type: "job", Key: fairPacedKey(), Priority: ax.P2}
	}
	reg := worker.NewRegistry()
	if err := reg.Handle("job", func(ctx context.Context, t *worker.Task) error {
		if fo.ByKey && t.Key == pacedSpec.Key || !fo.ByKey && t.Tenant == FairPaced {
			lat.add(since(t.Payload))
			pacedDone.n.Add(1)
			return nil
		}
		firstMu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		firstMu.Unlock()
		bulkDone.n.Add(1)
		if fo.Hold > 0 {
			select {
			case <-time.After(fo.Hold):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, nil); err != nil {
		return nil, err
	}
	for i := 0; i < o.Tasks; i += fairBatch {
		specs := make([]ax.TaskSpec, 0, fairBatch)
		for range min(fairBatch, o.Tasks-i) {
			specs = append(specs, bulkSpec)
		}
		if _, err := r.client.SubmitBatch(ctx, specs); err != nil {
			return nil, fmt.Errorf("fairness: submit the backlog: %w", err)
		}
	}
	label := "backlog alone"
	if rate > 0 {
		label = "backlog, paced tenant beside"
		if fo.ByKey {
			label = "backlog, paced key beside"
		}
	}
	bar := startProgress(o.Progress, label, o.Tasks, bulkDone.load)
	before, start := r.usage(), time.Now()
	var workers []*worker.Worker
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, w := range workers {
			_ = w.Stop(sctx)
		}
	}()
	for range o.Workers {
		w, err := worker.New(ctx, r.js, &worker.Config{Names: r.names, Registry: reg, Concurrency: o.Concurrency, PrefetchPerShard: o.Prefetch, Logger: zap.NewNop()})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	pctx, stopPacer := context.WithCancel(ctx)
	var submitted int64
	var pacerErr error
	var wg sync.WaitGroup
	if rate > 0 {
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				spec := pacedSpec
				spec.Payload = stamp(nil)
				if _, err := paced.Submit(pctx, spec); err != nil {
					if pctx.Err() == nil {
						pacerErr = err
					}
					return
				}
				submitted++
			}
		})
	}
	err := waitFor(ctx, func() bool { return bulkDone.load() >= int64(o.Tasks) })
	after := r.usage()
	firstMu.Lock()
	elapsed := time.Since(first)
	firstMu.Unlock()
	if elapsed <= 0 {
		elapsed = time.Since(start)
	}
	stopPacer()
	wg.Wait()
	bar.end()
	if err != nil {
		return nil, err
	}
	if pacerErr != nil {
		return nil, fmt.Errorf("fairness: the paced tenant's submit: %w", pacerErr)
	}
	if err := waitFor(ctx, func() bool { return pacedDone.load() >= submitted }); err != nil {
		return nil, err
	}
	res := &Result{Workers: o.Workers, Concurrency: o.Concurrency, Sync: o.Sync}
	measure(res, o.Tasks, elapsed, before, after)
	lat.fill(res)
	res.Extra = map[string]float64{"paced_tasks": float64(submitted)}
	if rate > 0 {
		res.Extra["paced_rate"] = float64(rate)
	}
	return res, nil
}
