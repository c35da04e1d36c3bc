package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Fair deployments (streams.Config.Fair): each tenant has its own
// consumer per (priority, shard), which the leader creates when it first
// sees the tenant and lists in AX_CONTROL/tenants. A worker has one
// [shardSet] per tenant listed, all serving the shards the catch-all
// shard table gives it; it watches the list and adds a set, serving the
// same shards, for each tenant added. The dispatch queue takes the
// tenants' deliveries in turn ([turns]).

// tenantsRetry is how often a worker retries serving a tenant's consumers
// it failed to serve, and watching the tenants after a failed watch.
const tenantsRetry = time.Second

// tenantSets is what a worker's shard sets serve, and the lock under which
// sets are added and switched.
type tenantSets struct {
	mu       sync.Mutex
	mine     []int       // the shards every set serves as owned, as last applied (mu)
	assist   []int       // and as assisted (mu)
	applied  bool        // mine and assist were applied (mu)
	unserved []*shardSet // sets added since, not serving yet (mu)
	owned    atomic.Uint32

	stop context.CancelFunc // ends the watch of the tenants; nil before it starts
	done chan struct{}      // closed when the watch has returned
}

// shardSets returns the worker's shard sets.
func (in *intake) shardSets() []*shardSet {
	in.tenants.mu.Lock()
	defer in.tenants.mu.Unlock()
	return slices.Clone(in.sets)
}

// fairOwned lists the shards a worker of a fair deployment owns.
func (in *intake) fairOwned() []int {
	bits := in.tenants.owned.Load()
	out := []int{}
	for shard := range streams.Shards {
		if bits&(1<<shard) != 0 {
			out = append(out, shard)
		}
	}
	return out
}

// serveAll serves mine (owned) and assist in every set, and remembers them
// for the sets added later.
func (in *intake) serveAll(ctx context.Context, mine, assist []int) error {
	in.tenants.mu.Lock()
	defer in.tenants.mu.Unlock()
	var errs []error
	for _, s := range in.sets {
		errs = append(errs, in.serveShards(ctx, s, mine, assist))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	in.tenants.mine, in.tenants.assist, in.tenants.applied = slices.Clone(mine), slices.Clone(assist), true
	in.tenants.unserved = nil
	var bits uint32
	for _, shard := range mine {
		bits |= 1 << shard
	}
	in.tenants.owned.Store(bits)
	return nil
}

// bindTenants prepares a worker of a fair deployment: one set per tenant
// listed, and the consumer settings the deployment was provisioned with
// (kept in the buckets' metadata), which an explicit AckWait must match.
func (in *intake) bindTenants(ctx context.Context, cfg *streams.Config) error {
	listed, err := in.readTenants(ctx)
	if err != nil {
		return err
	}
	cc, err := streams.ConsumerConfig(cfg, 0, 0)
	if err != nil {
		return err
	}
	if in.cfg.AckWait != 0 && in.cfg.AckWait != cc.AckWait {
		return fmt.Errorf("%w: AckWait is %s here but %s on the deployment's consumers (stream %s metadata): set the worker's AckWait (--ack-wait) to %s, or leave it zero to adopt the consumers'",
			ErrConfigMismatch, in.cfg.AckWait, cc.AckWait, in.cfg.Names.PriorityStream(0), cc.AckWait)
	}
	in.cfg.AckWait, in.policy, in.layout = cc.AckWait, cc.PriorityPolicy, streams.LayoutFair
	for _, t := range listed.Tenants {
		in.sets = append(in.sets, &shardSet{tenant: t})
	}
	return nil
}

// readTenants reads the tenants listed in AX_CONTROL/tenants through a
// watch (a worker may watch the control keys, not read them with a direct
// get), waiting at most opTimeout.
func (in *intake) readTenants(ctx context.Context) (control.Tenants, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	board, err := control.Open(ctx, in.js, in.cfg.Names)
	if err != nil {
		return control.Tenants{}, err
	}
	watch, err := board.Watch(ctx, control.TenantsKey)
	if err != nil {
		return control.Tenants{}, fmt.Errorf("watch %s: %w", control.TenantsKey, err)
	}
	defer func() { _ = kv.StopWatch(watch) }()
	var listed control.Tenants
	for {
		select {
		case <-ctx.Done():
			return control.Tenants{}, fmt.Errorf("read %s: %w", control.TenantsKey, ctx.Err())
		case e, ok := <-watch.Updates():
			if !ok {
				return control.Tenants{}, fmt.Errorf("read %s: the watch closed", control.TenantsKey)
			}
			if e == nil {
				return listed, nil
			}
			if e.Operation() == jetstream.KeyValuePut {
				listed, err = control.DecodeTenants(e.Value())
				if errors.Is(err, control.ErrForeignValue) {
					// The leader writes the list again (from the consumers
					// that exist); the watch adds its tenants then.
					in.log.Warn("tenants_foreign_value", zap.Uint64("revision", e.Revision()), zap.Error(err))
					listed = control.Tenants{}
				} else if err != nil {
					return control.Tenants{}, err
				}
			}
		}
	}
}

// startTenants starts the watch of the tenants of a fair deployment.
func (in *intake) startTenants() {
	ctx, cancel := context.WithCancel(context.Background())
	in.tenants.stop, in.tenants.done = cancel, make(chan struct{})
	go func() { defer close(in.tenants.done); in.watchTenants(ctx) }()
}

// stopTenants ends the watch of the tenants and waits for it.
func (in *intake) stopTenants() {
	if in.tenants.stop != nil {
		in.tenants.stop()
		<-in.tenants.done
	}
}

// watchTenants adds a set for each tenant listed in AX_CONTROL/tenants and
// serves it, until ctx ends. A failed watch is made again after
// tenantsRetry; so is a set that failed to serve.
func (in *intake) watchTenants(ctx context.Context) {
	retry := time.NewTicker(tenantsRetry)
	defer retry.Stop()
	var watch jetstream.KeyWatcher
	var updates <-chan jetstream.KeyValueEntry // nil while there is no watch
	defer func() {
		if watch != nil {
			_ = kv.StopWatch(watch)
		}
	}()
	for {
		if watch == nil {
			board, err := control.Open(ctx, in.js, in.cfg.Names)
			if err == nil {
				watch, err = board.Watch(ctx, control.TenantsKey)
			}
			if err != nil && ctx.Err() == nil {
				in.log.Warn("tenants_watch_failed", zap.Error(err))
			}
			if watch != nil {
				updates = watch.Updates()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
			in.serveAdded(ctx)
		case e, ok := <-updates:
			if !ok {
				_ = kv.StopWatch(watch)
				watch, updates = nil, nil
				continue
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			listed, err := control.DecodeTenants(e.Value())
			if err != nil {
				in.log.Error("tenants_decode", zap.Uint64("revision", e.Revision()), zap.Error(err))
				continue
			}
			in.addTenants(listed.Tenants)
			in.serveAdded(ctx)
		}
	}
}

// addTenants adds a set for each of tenants the worker has none for.
func (in *intake) addTenants(tenants []string) {
	in.tenants.mu.Lock()
	defer in.tenants.mu.Unlock()
	for _, t := range tenants {
		if slices.ContainsFunc(in.sets, func(s *shardSet) bool { return s.tenant == t }) {
			continue
		}
		s := &shardSet{tenant: t}
		in.sets = append(in.sets, s)
		in.tenants.unserved = append(in.tenants.unserved, s)
		in.log.Info("tenant_added", zap.String("tenant", t))
	}
}

// serveAdded serves, in the sets added since, the shards the others serve.
func (in *intake) serveAdded(ctx context.Context) {
	in.tenants.mu.Lock()
	defer in.tenants.mu.Unlock()
	if !in.tenants.applied || in.stopping.Load() {
		return
	}
	var left []*shardSet
	for _, s := range in.tenants.unserved {
		if err := in.serveShards(ctx, s, in.tenants.mine, in.tenants.assist); err != nil {
			if ctx.Err() == nil {
				in.log.Warn("serve_shards_failed", zap.String("tenant", s.tenant), zap.Error(err))
			}
			left = append(left, s)
		}
	}
	in.tenants.unserved = left
}
