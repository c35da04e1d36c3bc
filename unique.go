package ax

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Bounds and defaults of unique tasks ([UniqueOpts]).
const (
	// MaxUniqueFor is the longest unique period.
	MaxUniqueFor = 366 * 24 * time.Hour
	// MaxUniqueKeyLen bounds [UniqueOpts.Key] (it is hashed, so any bytes).
	MaxUniqueKeyLen = 4096
	// DefaultUniqueGrace is the default [Config.UniqueGrace].
	DefaultUniqueGrace = time.Minute
)

// claimWriteTimeout bounds the write that marks a claim published or
// releases it.
const claimWriteTimeout = 5 * time.Second

// UniqueOpts makes a submit unique, as River's unique options and asynq's
// Unique do: while a task of the same tenant and type, submitted with the
// same unique key (Key, or else the payload: "unique by args") within the
// period For, is in one of States, another such submit publishes nothing
// and returns that task ([TaskInfo.UniqueSkipped]). docs/API.md, "Unique
// tasks", says what holds when a submitter dies half way.
type UniqueOpts struct {
	// Key, when set, is what makes two submits of a type the same; empty:
	// the payload (unique by args). At most [MaxUniqueKeyLen] bytes.
	Key string `json:"key,omitempty"`
	// For is the period, from the submit that made the task: at least 1s,
	// at most [MaxUniqueFor], rounded up to whole seconds (the claim's TTL).
	// Required.
	For time.Duration `json:"for"`
	// States in which the earlier task still blocks a new one. Empty:
	// [DefaultUniqueStates], every state but DEAD and CANCELLED. A submit
	// that finds the earlier task in any other state makes a new task.
	States []axtype.State `json:"states,omitempty"`
}

// DefaultUniqueStates are the states [UniqueOpts] holds in when it names
// none: the waiting and running ones (PENDING, READY, RUNNING, RETRYING,
// PAUSED) and SUCCEEDED, as River's default: a task that succeeded within
// the period is not run again; one that died or was cancelled may be.
func DefaultUniqueStates() []axtype.State {
	return []axtype.State{kv.StatePending, kv.StateReady, kv.StateRunning, kv.StateRetrying, kv.StatePaused, kv.StateSucceeded}
}

// normalize fills the defaults of u and validates it.
func (u UniqueOpts) normalize() (*UniqueOpts, error) {
	if u.For < time.Second || u.For > MaxUniqueFor {
		return nil, fmt.Errorf("Unique.For %s is not 1s..%s", u.For, MaxUniqueFor)
	}
	u.For = (u.For + time.Second - 1).Truncate(time.Second)
	if len(u.Key) > MaxUniqueKeyLen {
		return nil, fmt.Errorf("Unique.Key is %d bytes, above %d", len(u.Key), MaxUniqueKeyLen)
	}
	if len(u.States) == 0 {
		u.States = DefaultUniqueStates()
	}
	states := make([]kv.State, 0, len(u.States))
	for _, s := range u.States {
		upper := kv.State(strings.ToUpper(string(s)))
		if !slices.Contains(kv.States(), upper) {
			return nil, fmt.Errorf("Unique.States: %q is not a state (%s)", s, statesList())
		}
		if !slices.Contains(states, upper) {
			states = append(states, upper)
		}
	}
	u.States = states
	return &u, nil
}

func statesList() string {
	var names []string
	for _, s := range kv.States() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// UniqueHash is the hash that names a unique key of tasks of type
// taskType in AX_UNIQUE (docs/WIRE.md): the hex SHA-256 of the type, a
// line feed, "key" and a line feed, then the key; or, unique by args (an
// empty key), of the type, a line feed, "args" and a line feed, then the
// payload.
func UniqueHash(taskType, key string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(taskType))
	if key != "" {
		h.Write([]byte("\nkey\n"))
		h.Write([]byte(key))
	} else {
		h.Write([]byte("\nargs\n"))
		h.Write(payload)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// submitUnique submits a normalized task with Unique set: it claims the
// task's unique key first (or finds the task that holds it), submits, and
// marks the claim published.
func (c *Client) submitUnique(ctx context.Context, t TaskSpec) (TaskInfo, error) {
	key := kv.ClaimKey(t.Tenant, UniqueHash(t.Type, t.Unique.Key, t.Payload))
	guard, gctx := denied.Watch(ctx, c.js.Conn())
	defer guard.Stop()
	mine := &kv.Claim{Tenant: t.Tenant, ID: t.ID, Type: t.Type, Priority: level(t.Priority), Key: t.Key, For: kv.Duration(t.Unique.For)}
	holder, rev, err := c.claimUnique(gctx, t, key, mine)
	if err != nil {
		if d := guard.Err(nil); d != nil {
			var de *denied.Error
			if errors.As(d, &de) {
				de.Hint = "a unique task's submitter needs its tenant's AX_UNIQUE claims and task records (docs/SECURITY.md, \"Unique tasks\")"
			}
			err = d
		}
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, fmt.Errorf("submit unique task %s: %w", t.ID, err)
	}
	if holder != nil {
		return TaskInfo{
			ID: holder.ID, Type: t.Type, Tenant: t.Tenant, Priority: PriorityOf(holder.Priority), Shard: streams.Shard(holder.Key),
			Stream: holder.Stream, Sequence: holder.Seq, Duplicate: true, UniqueSkipped: true,
		}, nil
	}
	// A submit that outlasts the grace may find its claim taken over:
	// publish within half of it.
	sctx, cancel := context.WithTimeout(ctx, c.cfg.UniqueGrace/2)
	defer cancel()
	info, err := c.submit(sctx, t)
	// The claim's last write is made even when ctx ends meanwhile.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), claimWriteTimeout)
	defer fcancel()
	if err != nil {
		if errors.Is(err, ErrOverloaded) || errors.Is(err, ErrInvalidTask) { // nothing stored: free the key
			_ = c.claims.Release(fctx, key, rev)
		}
		return info, err
	}
	if !info.RunAt.IsZero() && !c.cfg.PublishOnly {
		mine.MarkPublished("", 0) // its record names its schedule
	} else {
		mine.MarkPublished(info.Stream, info.Sequence)
	}
	if _, err := c.claims.Update(fctx, key, mine, t.Unique.For, rev); err != nil {
		// The task is stored; its claim stays unpublished, and holds for
		// the grace, or as long as the task has a record in States.
		c.cfg.Logger.Warn("unique_claim_not_confirmed", zap.String("task_id", t.ID), zap.String("tenant", t.Tenant),
			zap.String("claim", key), zap.Error(err))
	}
	return info, nil
}

// claimUnique claims key for the task t, or returns the claim of the task
// that holds it. It returns the revision of t's claim.
func (c *Client) claimUnique(ctx context.Context, t TaskSpec, key string, mine *kv.Claim) (*kv.Claim, uint64, error) {
	for range maxMoveTries {
		rev, err := c.claims.Create(ctx, key, mine, t.Unique.For)
		if err == nil {
			return nil, rev, nil
		}
		if errors.Is(err, kv.ErrBadClaim) && rev != 0 {
			rev, err = c.takeOverForeign(ctx, t, key, mine, rev, err)
			if errors.Is(err, kv.ErrConflict) {
				continue // another submit changed it: judge again
			}
			return nil, rev, err
		}
		if !errors.Is(err, kv.ErrClaimed) {
			return nil, 0, err
		}
		claim, rev, stored, err := c.claims.GetStored(ctx, key)
		if errors.Is(err, kv.ErrNotFound) {
			continue // expired or released in between
		}
		if errors.Is(err, kv.ErrBadClaim) && rev != 0 {
			rev, err = c.takeOverForeign(ctx, t, key, mine, rev, err)
			if errors.Is(err, kv.ErrConflict) {
				continue
			}
			return nil, rev, err
		}
		if err != nil {
			return nil, 0, err
		}
		if claim.ID == t.ID {
			return nil, rev, nil // this task's own claim: a retried submit
		}
		holds, err := c.holds(ctx, t, claim, stored)
		if err != nil {
			return nil, 0, err
		}
		if holds {
			return claim, rev, nil
		}
		rev, err = c.claims.Update(ctx, key, mine, t.Unique.For, rev) // take the key over
		if errors.Is(err, kv.ErrConflict) {
			continue // another submit changed it: judge again
		}
		if err != nil {
			return nil, 0, err
		}
		return nil, rev, nil
	}
	return nil, 0, fmt.Errorf("unique claim %s kept changing: %w", key, kv.ErrConflict)
}

// takeOverForeign replaces a value that is not a claim of the key's tenant
// (found, at revision rev) by t's claim: it holds nothing, and may have no
// TTL (a publish acknowledgement the server sent to a reply subject naming
// the key, docs/SECURITY.md), so left alone it would refuse every submit
// of the key for good. It returns [kv.ErrConflict] if the key changed.
func (c *Client) takeOverForeign(ctx context.Context, t TaskSpec, key string, mine *kv.Claim, rev uint64, found error) (uint64, error) {
	rev, err := c.claims.Update(ctx, key, mine, t.Unique.For, rev)
	if err == nil {
		c.cfg.Logger.Warn("unique_claim_foreign_replaced", zap.String("task_id", t.ID), zap.String("tenant", t.Tenant),
			zap.String("claim", key), zap.NamedError("found", found))
	}
	return rev, err
}

// holds reports whether claim, stored at stored, still holds its key
// against t: its task's record is in one of t's unique states; or it has
// no record (no worker has seen its message yet) and it was published, or
// was claimed less than the grace ago (its submit may still publish).
func (c *Client) holds(ctx context.Context, t TaskSpec, claim *kv.Claim, stored time.Time) (bool, error) {
	rec, _, err := kv.GetRecord(ctx, c.js.Conn(), c.cfg.Names, kv.Ref{Tenant: t.Tenant, ID: claim.ID})
	switch {
	case err == nil:
		state := rec.State
		if from := rec.WaitsAsideFrom(); from != "" {
			// Held back by a limit or a pause and waiting out of its
			// consumer: a READY task (or a retry, paused aside after its
			// backoff), not a delayed one.
			state = from
		}
		return slices.Contains(t.Unique.States, state), nil
	case errors.Is(err, kv.ErrNotFound), errors.Is(err, kv.ErrForeignRecord):
		// No record, or a value ax did not write in its place (which the
		// worker that takes the task's message rebuilds): as unseen.
		if claim.Published || time.Since(stored) < c.cfg.UniqueGrace {
			return true, nil
		}
		return c.messageWaits(ctx, t, claim)
	}
	return false, fmt.Errorf("the unique key is claimed by task %s, whose record cannot be read: %w", claim.ID, err)
}

// messageWaits reports whether a message waits in its bucket on the
// subject of claim's task (its priority, tenant, type and partition key):
// its submitter died after it published and before it marked the claim
// published, and no worker has seen it yet. It may be another task's
// message of that subject: then the key is held a while longer, which is
// the safe side. A publish-only client may not read the buckets: it does
// not look, and reports false.
func (c *Client) messageWaits(ctx context.Context, t TaskSpec, claim *kv.Claim) (bool, error) {
	if c.cfg.PublishOnly || claim.Priority < 0 || claim.Priority >= streams.Priorities || streams.ValidateToken("key", claim.Key) != nil {
		return false, nil
	}
	names := c.cfg.Names
	stream, err := c.js.Stream(ctx, names.PriorityStream(claim.Priority))
	if err != nil {
		return false, fmt.Errorf("look for the message of task %s: %w", claim.ID, err)
	}
	subject := names.StoredSubject(claim.Priority, streams.Shard(claim.Key), t.Tenant, t.Type, claim.Key)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return false, fmt.Errorf("look for the message of task %s: %w", claim.ID, err)
	}
	return info.State.Subjects[subject] > 0, nil
}
