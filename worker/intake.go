package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// intake is the worker's first stage: it owns the shard sets and their
// pullers (shards.go, tenants.go, bind.go, agree.go), the worker's place in
// the mesh (membership.go, mesh.go, pools.go, assist.go) and its readiness
// (ready.go), and queues what the pullers bring for the slots ([intake.receive]).
// The [Worker] starts it ([intake.bindShards], [intake.serve]), stops it
// ([intake.stop]) and asks it what it serves. It uses nothing of the
// worker but the services below, given by [New].
type intake struct {
	cfg       *Config // shared with the worker: binding adopts the consumers' AckWait into it
	js        jetstream.JetStream
	log       *zap.Logger
	dispatch  *dispatchQueue    // where received deliveries wait for a slot
	held      *heldSet          // every message held, for heartbeats
	release   func(d *delivery) // hands an unstarted delivery back (the worker stopping)
	running   *sync.Map         // the run stage's executions: counted in the member record, cancelled when the membership is lost
	unhandled *unhandledTypes   // types put back lately for want of a handler, announced in the member record
	stopping  *atomic.Bool      // set when the worker's Stop begins
	stopCh    <-chan struct{}   // closed when the worker's Stop begins
	loops     *sync.WaitGroup   // the worker's background loops, waited for by Stop

	sets       []*shardSet              // consumers of the shards served: one set, one per task type (pools), or one per tenant (fair: added as tenants come, under tenants.mu); set by bindShards
	layout     streams.Layout           // the deployment's: pools, the sets are per task type; fair, per tenant, added as tenants come (tenants.go); set by bindShards
	tenants    tenantSets               // on a fair deployment: the sets' lock and what they serve
	policy     jetstream.PriorityPolicy // of the consumers: set by bindShards before any switch, read-only after
	maxMsgSize int32                    // the buckets' MaxMsgSize (AX_P0's); set by bindShards before any delivery, read-only after
	stopMesh   context.CancelFunc       // nil with fixed shards
	lease      atomic.Pointer[kv.Lease] // the membership lease; nil with fixed shards
	// memberEpoch counts the memberships lost: an execution started in an
	// earlier epoch no longer holds its task ([Task.Held]).
	memberEpoch atomic.Uint64
	meshDone    chan struct{}
	serving     chan struct{}             // closed once the mesh's shards are first served, their first requests sent
	ready       chan struct{}             // closed once Start has ended and the worker serves its shards ([Worker.Ready])
	peers       atomic.Pointer[peerTypes] // what the live peers handle; nil with fixed shards
	pulling     pullerSet                 // pullers not returned yet, stopped ones whose request lingers included
}

// serve joins the mesh, or serves the fixed [Config.Shards], and waits
// until the shards are served (see [Worker.Start]).
func (in *intake) serve(ctx context.Context) error {
	if !in.cfg.mesh {
		if err := in.serveFixed(ctx); err != nil {
			return err
		}
		in.awaitPulls(ctx)
		return nil
	}
	m, err := in.newMember(ctx)
	if err != nil {
		return err
	}
	meshCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in.stopMesh = cancel
	in.meshDone, in.serving = make(chan struct{}), make(chan struct{})
	go func() { defer close(in.meshDone); in.runMesh(meshCtx, m) }()
	in.awaitServing(ctx)
	return nil
}

// stop leaves the mesh (stops consuming, releases the lease), stops the
// tenants' watch and every puller, and ends every open request.
func (in *intake) stop() {
	if in.stopMesh != nil {
		in.stopMesh() // leaves the mesh: stops consuming, releases the lease
		<-in.meshDone
	}
	in.stopTenants() // adds no set from here on
	in.stopShards()
	// End every open request before anything held is handed back,
	// so that no handed-back message is sent to a request of this
	// worker that is then ended with it in flight.
	in.pulling.abort()
}

// member reports whether the worker still holds the membership it held
// at epoch (always true with fixed shards), checked synchronously against
// the lease's validity.
func (in *intake) member(epoch uint64) bool {
	if !in.cfg.mesh {
		return true
	}
	lease := in.lease.Load()
	return lease != nil && in.memberEpoch.Load() == epoch && lease.Held()
}

// consumeError logs what a pull request reports. A request that ends for
// a missed heartbeat or a leader change is routine (the puller asks again),
// so only a lost consumer is a warning.
func (in *intake) consumeError(err error) {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		in.log.Warn("consume_error", zap.Error(err))
		return
	}
	in.log.Debug("consume_error", zap.Error(err))
}

// receive queues a message that pl's request brought for the slots, at
// once and without waiting: from here on it is held, and heartbeated until
// it is settled. A slot taking it gives pl its credit back. A message
// brought by a stopped puller's lingering request is handed back at once,
// even if the worker still serves its shard in another mode: a shard now
// only stolen from, or pulled beside its owner, must not take what its
// owner's requests would ([puller.stop]).
func (in *intake) receive(pl *puller, msg jetstream.Msg) {
	if in.stopping.Load() || pl.stopped() || !pl.s.accepts(pl.shard) {
		refuse(msg)
		pl.give(1)
		if pl.stopped() && !in.stopping.Load() && in.policy == jetstream.PriorityPolicyPinned {
			pl.givePin()
		}
		return
	}
	now := time.Now()
	meta, _ := msg.Metadata() // nil if unreadable: process terms the message
	d := &delivery{msg: msg, meta: meta, set: pl.s, from: pl, priority: pl.p, shard: pl.shard, flow: flowState{room: pl.parkRoom}, lastBeat: now, log: in.log}
	d.since, d.aged = waitingSince(msg, meta, now)
	in.held.add(d)
	if !in.dispatch.push(d) {
		in.release(d) // the worker is stopping
		pl.give(1)
	}
}
