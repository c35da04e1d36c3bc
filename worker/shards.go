package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// shardMode is how a worker consumes one shard.
type shardMode int

const (
	shardIdle   shardMode = iota // not consumed
	shardOwned                   // consumed as its owner
	shardSteal                   // consumed only while its backlog is above the steal threshold (overflow policy)
	shardAssist                  // consumed beside its owner, which lacks a handler this worker has (see [intake.assistShards])
)

// shardSet holds the consumers of the shards a worker serves, five per shard
// (one per priority), and switches them when ownership changes. A worker
// has one set for the catch-all shard consumers, or on a pools deployment
// one per task type it registers, or on a fair deployment one per tenant.
type shardSet struct {
	typ    string        // the task type of a pools deployment; "" for the catch-all consumers
	tenant string        // the tenant of a fair deployment; ""  for the catch-all consumers
	accept atomic.Uint32 // bit s set: deliveries of shard s may start here
	owned  atomic.Uint32 // bit s set: the worker owns shard s

	locks   [streams.Shards]sync.Mutex // locks[s] serializes switches of shard s and guards modes[s], pullers[s], handles[s]
	modes   [streams.Shards]shardMode
	pullers [streams.Shards][]*puller
	handles [streams.Shards][streams.Priorities]jetstream.Consumer // bound consumers, reused unless pinned
}

// accepts reports whether a delivery of shard may still start here.
func (s *shardSet) accepts(shard int) bool { return s.accept.Load()&(1<<shard) != 0 }

// ownedShards lists the shards the worker owns.
func (s *shardSet) ownedShards() []int {
	bits := s.owned.Load()
	out := []int{}
	for shard := range streams.Shards {
		if bits&(1<<shard) != 0 {
			out = append(out, shard)
		}
	}
	return out
}

// consumerName returns the name of the consumer of (p, shard) in set s.
func (in *intake) consumerName(s *shardSet, p, shard int) string {
	switch {
	case s.typ != "":
		return in.cfg.Names.TypeConsumerName(p, shard, s.typ)
	case s.tenant != "":
		return in.cfg.Names.TenantConsumerName(p, shard, s.tenant)
	}
	return in.cfg.Names.ConsumerName(p, shard)
}

// consumerFilter returns the filter subject of the consumer of (p, shard)
// in set s.
func (in *intake) consumerFilter(s *shardSet, p, shard int) string {
	switch {
	case s.typ != "":
		return in.cfg.Names.TypeFilter(p, shard, s.typ)
	case s.tenant != "":
		return in.cfg.Names.TenantFilter(p, shard, s.tenant)
	}
	return in.cfg.Names.ShardFilter(p, shard)
}

// bindShards learns the ack wait and priority policy of the shard
// consumers (provisioning gives every consumer the same), retrying while
// the server cannot answer, and refuses a worker config that disagrees
// ([intake.adoptConsumer]). On a pools deployment it first creates the
// consumers of the types the worker registers that do not exist yet.
func (in *intake) bindShards(ctx context.Context) error {
	pools, err := in.deploymentPools(ctx)
	if err != nil {
		return err
	}
	if pools != nil && pools.Layout == streams.LayoutFair {
		return in.bindTenants(ctx, pools)
	}
	if pools == nil {
		if in.cfg.Registry.narrowed {
			return fmt.Errorf("%w: the worker serves only %s (Registry.Only, ax worker --types), but the deployment routes every type to every worker "+
				"and the tasks of the others would wait on its shards for another worker; provision it with pools (ax provision --pools) or serve every type", ErrConfigMismatch, strings.Join(slices.Sorted(slices.Values(in.cfg.Registry.Types())), ", "))
		}
		in.sets = []*shardSet{{}}
	} else {
		types := in.cfg.Registry.Types()
		slices.Sort(types)
		if len(types) == 0 {
			return fmt.Errorf("%w: a worker of a pools deployment must register at least one task type", ErrConfigMismatch)
		}
		for _, t := range types {
			n, err := streams.EnsureTypeConsumers(ctx, in.js, pools, t)
			if err != nil {
				return fmt.Errorf("consumers of type %s: %w", t, err)
			}
			if n > 0 {
				in.log.Info("type_consumers_created", zap.String("type", t), zap.Int("consumers", n))
			}
			in.sets = append(in.sets, &shardSet{typ: t})
		}
		in.layout = streams.LayoutPools
	}
	cons, err := in.bindConsumer(ctx, in.sets[0], 0, 0)
	if err != nil {
		return err
	}
	return in.adoptConsumer(in.sets[0], cons.CachedInfo())
}

// canSteal reports whether the worker pulls from shards it does not own:
// only a mesh member, under the overflow policy, with stealing enabled.
func (in *intake) canSteal() bool {
	return in.cfg.mesh && in.policy == jetstream.PriorityPolicyOverflow && in.cfg.StealThreshold > 0
}

// serveShards switches every shard of set s to its mode: the shards in
// mine are owned, those in assist are pulled from beside their owner, the
// others are stolen from (overflow policy) or left alone. Shards switch in
// parallel, each taking a few round trips to the server.
func (in *intake) serveShards(ctx context.Context, s *shardSet, mine, assist []int) error {
	errs := make([]error, streams.Shards)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for shard := range next {
				mode := shardIdle
				switch {
				case slices.Contains(mine, shard):
					mode = shardOwned
				case slices.Contains(assist, shard):
					mode = shardAssist
				case in.canSteal():
					mode = shardSteal
				}
				errs[shard] = in.setShard(ctx, s, shard, mode)
			}
		})
	}
	for shard := range streams.Shards {
		next <- shard
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// setShard stops the shard's consumers if its mode changes and starts the
// new mode's. Deliveries already held keep their claim; those not started
// when the shard is left are handed back by the slots (see [Worker.slot]).
func (in *intake) setShard(ctx context.Context, s *shardSet, shard int, mode shardMode) error {
	s.locks[shard].Lock()
	defer s.locks[shard].Unlock()
	if s.modes[shard] == mode {
		return nil
	}
	bit := uint32(1) << shard
	if mode == shardOwned {
		s.owned.Or(bit)
	} else {
		s.owned.And(^bit)
	}
	if mode == shardIdle {
		s.accept.And(^bit)
	}
	stopPullers(s.pullers[shard])
	s.pullers[shard], s.modes[shard] = nil, shardIdle
	if mode == shardIdle {
		return nil
	}
	s.accept.Or(bit)
	for p := range streams.Priorities {
		pl, err := in.consumeShard(ctx, s, p, shard, mode)
		if err != nil {
			stopPullers(s.pullers[shard])
			s.pullers[shard] = nil
			s.accept.And(^bit)
			s.owned.And(^bit)
			return err
		}
		s.pullers[shard] = append(s.pullers[shard], pl)
	}
	s.modes[shard] = mode
	return nil
}

// pullExpiry and pullHeartbeat shape the pull requests of a shard consumer:
// an idle consumer asks again every pullExpiry, and the server sends it an
// idle heartbeat every pullHeartbeat; two missed heartbeats end the request
// and the puller asks again.
const (
	pullExpiry    = 30 * time.Second
	pullHeartbeat = 2 * time.Second
)

// consumeShard starts the puller of (p, shard) of set s in mode.
func (in *intake) consumeShard(ctx context.Context, s *shardSet, p, shard int, mode shardMode) (*puller, error) {
	name := in.consumerName(s, p, shard)
	// Binding costs a consumer info request (a replicated one in a
	// cluster), so handles are reused; except under pinned_client, where
	// nats.go keeps the pin id on the handle and each start needs a fresh
	// one. (locks[shard] is held.)
	cons := s.handles[shard][p]
	if cons == nil || in.policy == jetstream.PriorityPolicyPinned {
		var err error
		if cons, err = in.bindConsumer(ctx, s, p, shard); err != nil {
			return nil, err
		}
		s.handles[shard][p] = cons
	}
	// One request asks for as many messages as the puller has credit for
	// (up to PrefetchPerShard), and every message it brings is queued, and
	// heartbeated, as it arrives ([puller]). Requests are Fetch calls, not
	// a Consume context: nats.go's Consume hands a message over only when
	// the callback for the one before it returns, so a second message
	// would wait unheartbeated behind a callback that waits for a slot;
	// and (v1.55.0) it skips a refill that coincides with the publish of
	// the previous request, and answers a missed heartbeat with a second
	// request it keeps for good. Each request here is sent on its own
	// subscription, and the next is sent when it ends (filled, expired, or
	// two heartbeats missed), so none is left behind.
	// Each open request costs a heartbeat per period in the worker and
	// the server: three idle workers with their server used 128 ms of
	// CPU per second under the race detector with a 1 s heartbeat, 59 ms
	// with 2 s.
	var opts []jetstream.FetchOpt
	expiry := pullExpiry
	info := cons.CachedInfo()
	if err := in.checkConsumer(s, p, shard, info); err != nil {
		return nil, err
	}
	cfg := info.Config
	if mode == shardOwned && cfg.PriorityPolicy == jetstream.PriorityPolicyPinned && pinned(info) {
		// Take the pin from the previous owner now rather than after its
		// PinnedTTL: its pulls fail from here on (it may still settle what
		// it holds; the record's compare-and-set fences those).
		if err := in.unpin(ctx, p, name); err != nil {
			in.log.Debug("unpin_failed", zap.String("consumer", name), zap.Error(err))
		}
	}
	if len(cfg.PriorityGroups) > 0 {
		opts = append(opts, jetstream.FetchPriorityGroup(streams.PriorityGroup))
	}
	if cfg.PriorityPolicy == jetstream.PriorityPolicyPinned && cfg.PinnedTTL > 0 {
		// Pull again well within the PinnedTTL, so that an idle shard keeps
		// its pin instead of losing it and paying a wrong-pin round trip.
		expiry = max(time.Second, min(pullExpiry, cfg.PinnedTTL/2))
	}
	// The request's expiry is a little less than expiry (nats.go
	// FetchContext keeps the time left less min(10 %, 1 s)); the heartbeat
	// must be at most half of it.
	opts = append(opts, jetstream.FetchHeartbeat(min(pullHeartbeat, expiry/3)))
	if mode == shardSteal {
		opts = append(opts, jetstream.FetchMinPending(int64(in.cfg.StealThreshold)))
	}
	parkRoom := 0
	if cfg.MaxAckPending > 0 {
		parkRoom = max(1, cfg.MaxAckPending/2)
	}
	return newPuller(in, s, cons, p, shard, in.cfg.PrefetchPerShard, parkRoom, expiry, opts), nil
}

func (in *intake) unpin(ctx context.Context, p int, consumer string) error {
	stream, err := in.js.Stream(ctx, in.cfg.Names.PriorityStream(p))
	if err != nil {
		return err
	}
	return stream.UnpinConsumer(ctx, consumer, streams.PriorityGroup)
}

// pinned reports whether a client holds the pin of the consumer's group.
func pinned(info *jetstream.ConsumerInfo) bool {
	for _, g := range info.PriorityGroups {
		if g.PinnedClientID != "" {
			return true
		}
	}
	return false
}

// stopShards stops every shard's pullers.
func (in *intake) stopShards() {
	var all []*puller
	for _, s := range in.shardSets() {
		s.accept.Store(0)
		s.owned.Store(0)
		for shard := range s.pullers {
			s.locks[shard].Lock()
			all = append(all, s.pullers[shard]...)
			s.pullers[shard], s.modes[shard] = nil, shardIdle
			s.locks[shard].Unlock()
		}
	}
	stopPullers(all)
}

// serveNone stops consuming every set's shards (and a set added later
// serves none either).
func (in *intake) serveNone(ctx context.Context) error {
	return in.serveAll(ctx, nil, nil)
}

// ownedShards lists the shards the worker owns in any set, and per task
// type on a pools deployment (nil otherwise).
func (in *intake) ownedShards() ([]int, map[string][]int) {
	if in.layout == streams.LayoutFair {
		return in.fairOwned(), nil
	}
	if in.layout != streams.LayoutPools {
		return in.sets[0].ownedShards(), nil
	}
	var all []int
	per := make(map[string][]int, len(in.sets))
	for _, s := range in.sets {
		mine := s.ownedShards()
		per[s.typ] = mine
		all = append(all, mine...)
	}
	slices.Sort(all)
	return slices.Compact(all), per
}

// stopPullers stops pullers; their open requests run out ([puller.stop]).
func stopPullers(pullers []*puller) {
	for _, pl := range pullers {
		pl.stop()
	}
}
