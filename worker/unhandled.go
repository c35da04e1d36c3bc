package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// A task of a type the worker has no handler for is never dead-lettered for
// it. On a deployment without pools every worker receives every type, so a
// worker of the previous release running beside one of the next (a rolling
// deploy) receives types it does not know. It puts such a task back: the
// record goes READY again (its attempt not counted, the reason in its trail
// under [ActionNoHandler]) and the message is naked with a delay, so that
// a worker that has the handler takes it. Such a worker, seeing a live peer
// that lacks one of its types (the peers' [kv.Member.Handles]), pulls that
// peer's shards too ([shardAssist]); a redelivered message goes to the pull
// request that waited longest, most often the helper's. Under
// pinned_client, where only the pinned client receives a shard, the worker
// that puts a task back unpins its consumer when a live peer handles the
// type, so that the helper's waiting request is pinned next. With no live
// worker for the type the task waits, READY, until one joins or the
// operator's unserved deadline for the type dead-letters it (the leader).
const (
	// unhandledFirstDelay is the nak delay of a task's first put-back
	// while no live peer handles its type; it doubles with each delivery up
	// to unhandledWaitMax. While a live peer handles the type, the first
	// delay is unhandledHandOffFirst, doubling up to unhandledHandOff: the
	// redelivery goes to the next waiting request of the shard, in turn,
	// and a worker that has the handler is one of them (it assists the
	// shard), so a task of a type only some workers have bounces a few
	// times within milliseconds instead of waiting 250 ms or more at each
	// (measured beside two workers of other types: 503 ms median, 2.0 s
	// at most, before; TestOwnTypeBesideOtherWorkersStartsAtOnce).
	unhandledFirstDelay   = 250 * time.Millisecond
	unhandledWaitMax      = 10 * time.Second
	unhandledHandOffFirst = 5 * time.Millisecond
	unhandledHandOff      = time.Second
	// unhandledMemory is how long a type put back stays in the worker's
	// [kv.Member.Unhandled]; maxUnhandledReported bounds that list (a
	// producer chooses the types).
	unhandledMemory      = time.Minute
	maxUnhandledReported = 100
	// unhandledRedeliveries bounds the redeliveries per second that tasks
	// waiting for a handler cost a worker that no peer can relieve: no
	// put-back is shorter than the distinct tasks put back within
	// unhandledMemory allow at that rate (500 tasks: 10 s; 10,000: 200 s). A producer choosing types no worker has
	// would otherwise make a worker spend its capacity on put-backs (1,500
	// such tasks: 150 redeliveries a second, the new tasks behind them).
	// maxUnhandledTracked bounds the tasks counted.
	unhandledRedeliveries = 50
	maxUnhandledTracked   = 10_000
)

// stillUnhandled settles, with one record read and no write, a delivery of
// a task this worker already put back: the record is READY, names this
// message, and its last move is a put-back for want of a handler. It
// reports false when the delivery needs the full path (the claim).
func (rn *runner) stillUnhandled(d *delivery, env *envelope) bool {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rec, _, err := rn.store.Get(ctx, env.ref)
	if err != nil || rec.State != kv.StateReady || rec.LastMove().Action != ActionNoHandler || rec.Burying != "" ||
		!rec.Names(rn.cfg.Names, env.stream, env.seq) || rn.claimer.foreign(rec, env) != "" ||
		(rec.Deadline != nil && time.Now().After(*rec.Deadline)) {
		return false
	}
	rn.handBack(d, env)
	return true
}

// decline puts a claimed task of a type this worker has no handler for
// back: READY, the attempt not counted, the reason in its trail; then its
// message is naked with a delay for a worker that has the handler.
func (rn *runner) decline(d *delivery, env *envelope, rec *kv.Record, rev uint64) {
	if rn.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := rn.finalCtx()
	defer cancel()
	why := fmt.Sprintf("worker %s has no handler for task type %q (it handles %s); the task waits for a worker that has one",
		rn.cfg.ID, rec.Type, strings.Join(slices.Sorted(slices.Values(rn.cfg.Registry.Types())), ", "))
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: rn.cfg.ID, Action: ActionNoHandler, Error: why}, func(r *kv.Record) error {
		r.Attempt--
		return nil
	})
	if err != nil {
		rn.log.Warn("put_back_failed", zap.String("task_id", rec.ID), zap.Error(err))
		rn.settleFailedWrite(d, env, err)
		return
	}
	rn.log.Info("task_unhandled", zap.String("task_id", rec.ID), zap.String("type", rec.Type), zap.Bool("peer_handles", rn.intake.peerHandles(rec.Type)))
	rn.handBack(d, env)
}

// handBack naks a delivery of an unhandled task with its delay and, under
// pinned_client with a live peer for the type, unpins its consumer.
func (rn *runner) handBack(d *delivery, env *envelope) {
	typ := env.stored.Type
	rn.unhandled.note(typ, time.Now())
	rn.stats.Unhandled.Add(1)
	handOff := rn.intake.peerHandles(typ)
	delay := unhandledDelay(env.delivered, handOff, rn.unhandled.backlog(env.key, time.Now()))
	d.nakAfter(delay)
	if handOff && rn.intake.policy == jetstream.PriorityPolicyPinned && d.set != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := rn.intake.unpin(ctx, d.priority, rn.intake.consumerName(d.set, d.priority, d.shard)); err != nil {
			rn.log.Debug("unpin_failed", zap.Int("priority", d.priority), zap.Int("shard", d.shard), zap.Error(err))
		}
	}
}

// unhandledDelay is the nak delay of the delivered-th delivery of an
// unhandled task, backlog the distinct tasks the worker put back lately:
// when a live peer handles the type (handOff), unhandledHandOffFirst
// doubling up to unhandledHandOff, else unhandledFirstDelay doubling up to
// unhandledWaitMax, never shorter than the backlog at
// unhandledRedeliveries a second.
func unhandledDelay(delivered uint64, handOff bool, backlog int) time.Duration {
	if handOff {
		return min(unhandledHandOffFirst<<min(max(delivered, 1)-1, 20), unhandledHandOff)
	}
	paced := time.Duration(backlog) * time.Second / unhandledRedeliveries
	return max(min(unhandledFirstDelay<<min(max(delivered, 1)-1, 20), unhandledWaitMax), paced)
}

// unhandledTypes remembers the types the worker put back lately, for its
// member record: at most maxUnhandledReported, each for unhandledMemory;
// and how many distinct tasks it put back within unhandledMemory, at most
// maxUnhandledTracked.
type unhandledTypes struct {
	mu    sync.Mutex
	seen  map[string]time.Time // type -> last put back (mu)
	tasks map[string]time.Time // record key -> last put back (mu)
	swept time.Time            // when tasks was last pruned (mu)
}

// backlog notes that the task under key is put back at now and returns how
// many distinct tasks were put back within unhandledMemory.
func (u *unhandledTypes) backlog(key string, now time.Time) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tasks == nil {
		u.tasks = map[string]time.Time{}
	}
	if now.Sub(u.swept) > unhandledMemory/10 || len(u.tasks) >= maxUnhandledTracked {
		u.swept = now
		for k, at := range u.tasks {
			if now.Sub(at) > unhandledMemory {
				delete(u.tasks, k)
			}
		}
	}
	if _, ok := u.tasks[key]; ok || len(u.tasks) < maxUnhandledTracked {
		u.tasks[key] = now
	}
	return len(u.tasks)
}

// note records that a task of taskType was put back at now.
func (u *unhandledTypes) note(taskType string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = map[string]time.Time{}
	}
	if _, ok := u.seen[taskType]; !ok && len(u.seen) >= maxUnhandledReported {
		oldest := ""
		for t, at := range u.seen {
			if oldest == "" || at.Before(u.seen[oldest]) {
				oldest = t
			}
		}
		delete(u.seen, oldest)
	}
	u.seen[taskType] = now
}

// list returns the types put back within unhandledMemory of now, sorted.
func (u *unhandledTypes) list(now time.Time) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	for t, at := range u.seen {
		if now.Sub(at) > unhandledMemory {
			delete(u.seen, t)
		}
	}
	return slices.Sorted(maps.Keys(u.seen))
}
