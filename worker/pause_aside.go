package worker

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

// A paused type's or tenant's task is naked with a delay and comes back to
// its worker, where it holds its place in its shard consumer's ack pending;
// a consumer at its MaxAckPending delivers nothing new, so a paused backlog
// larger than that would hold back every other task of its shard until the
// pause ends. A task still paused at its pausedAsideAfter-th delivery (the
// pause has lasted a second and a half) leaves its consumer instead: it
// steps aside into AX_DELAYED, as a limited task does (limits_aside.go),
// with the trail action [kv.ActionPausedAside] and a long wait. When the
// pause ends the leader releases every task paused aside at once
// (scheduler/resumer.go); the wait only bounds how late one comes back if
// that release misses it.

// ActionPausedAside is the trail action of a READY task whose type or
// tenant was paused, moved to PENDING with its message in AX_DELAYED
// until the pause ends ([kv.ActionPausedAside]).
const ActionPausedAside = kv.ActionPausedAside

const (
	// pausedAsideAfter is the delivery of a paused task from which it
	// steps aside rather than being naked again.
	pausedAsideAfter = 3
	// pausedAsideFirst is how long a task paused aside waits in
	// AX_DELAYED the first time, doubled each time it was paused aside
	// before, up to pausedAsideMax: the leader releases it when its pause
	// ends, so the wait is only how often a long-paused task costs a move.
	pausedAsideFirst = time.Minute
	pausedAsideMax   = 30 * time.Minute
)

// pauseAsideMove is the move aside of a delivery of a paused type or
// tenant (target, as `ax limit ls` names it), out of its consumer into
// AX_DELAYED: made only from its pausedAsideAfter-th delivery ([runner.admit]),
// and only of a READY or RETRYING task on its message. A retry is
// delivered again once its backoff is over, so it waits only for the
// pause: a type paused because its tasks fail (its downstream is down)
// holds a retrying backlog, which would otherwise fill its shard
// consumer's ack pending as a READY one would. Released, it is READY, its
// attempts kept.
func pauseAsideMove(cfg *Config, target string) asideMove {
	return asideMove{action: ActionPausedAside, held: HeldPaused, target: target, retry: true, mark: streams.AsidePaused,
		wait: func(rec *kv.Record) time.Duration {
			wait := min(pausedAsideFirst<<min(steppedAside(rec, ActionPausedAside), 16), pausedAsideMax)
			return wait + rand.N(wait/4+1)
		},
		reason: func(runAt time.Time) string {
			return fmt.Sprintf("%s paused: waits in %s until the pause ends (at the latest until %s)",
				target, cfg.Names.DelayedStream(), runAt.Format(time.RFC3339Nano))
		}}
}
