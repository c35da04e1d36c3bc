package ax

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultEarly is how long before its run time a delayed task's server-side
// schedule fires; the leader's mover then releases it at the exact time.
// The server fires schedules in bursts at most every 250 ms under load.
const DefaultEarly = streams.DefaultScheduleEarly

// submitDelayed stores a normalized delayed task: its PENDING record first,
// then its server-side schedule in AX_DELAYED, fired [Config.Early] before
// its run time. The record comes first so that a submit never replaces the
// schedule of another task with the same id: an id that exists is a
// duplicate, unless its record is this very task's (a retried submit).
func (c *Client) submitDelayed(ctx context.Context, t TaskSpec) (TaskInfo, error) {
	info := t.info(c.cfg.Names, 0, false)
	submit := t.message(c.cfg.Names, true)
	if err := streams.CheckDelayedSize(submit.Data, submit.Header, c.delayedLimit(t.Priority.level())); err != nil {
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, fmt.Errorf("submit delayed task %s: %w: %w", t.ID, ErrInvalidTask, err)
	}
	want := t.record("", 0)
	_, rev, err := c.store.Create(ctx, want, kv.Actor{Action: "submit"})
	if errors.Is(err, kv.ErrExists) {
		var rec *kv.Record
		rec, rev, err = c.store.Get(ctx, want.Ref())
		switch {
		case err != nil:
		case heldUnseen(rec) && rec.State == kv.StateCancelled:
			return info, nil // the task its id was held for: cancelled before it came
		case heldUnseen(rec):
			// Paused before it came: its schedule waits; the mover keeps it
			// while the record is PAUSED, and releases it once a resume
			// has deleted the record (the id is unseen again).
		case !rec.SamePending(want):
			info.Duplicate = true
			return info, nil
		}
	}
	if err != nil {
		return info, fmt.Errorf("submit delayed task %s: %w", t.ID, err)
	}
	msg := c.cfg.Names.DelayedMsg(t.Tenant, t.ID, submit, t.RunAt.Add(-c.cfg.Early))
	for attempt := 0; ; attempt++ {
		_, err = c.js.PublishMsg(ctx, msg)
		if err == nil || !retryable(err) || attempt >= c.cfg.PublishRetries || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) { // refused: nothing was scheduled, so the task was not accepted
			_ = c.store.Delete(ctx, want.Ref(), rev)
		}
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, fmt.Errorf("submit delayed task %s: %w", t.ID, err)
	}
	return info, nil
}

// delayedLimit is the largest write of a delayed task of priority prio:
// the server's max_payload less the room AX_DELAYED and AX_DLQ take beyond
// a bucket's MaxMsgSize (provisioning keeps MaxMsgSize below that), or the
// bucket's MaxMsgSize as the last pressure report gave it, if smaller. The
// copy that releases the task goes to that bucket. 0 when neither is known.
func (c *Client) delayedLimit(prio int) int {
	limit := int(c.js.Conn().MaxPayload()) - streams.HeaderRoom
	if p := c.pressure.Load(); p != nil {
		for _, b := range p.Buckets {
			if b.Priority == prio && b.MaxMsgSize > 0 && (limit <= 0 || int(b.MaxMsgSize) < limit) {
				limit = int(b.MaxMsgSize)
			}
		}
	}
	return max(limit, 0)
}

// heldUnseen reports whether rec was written by an operator who paused or
// cancelled an id before any message named it: the first message of the
// id is the task it holds, not a duplicate.
func heldUnseen(rec *kv.Record) bool {
	return rec.Type == "" && rec.StreamSeq == 0 && (rec.State == kv.StatePaused || rec.State == kv.StateCancelled)
}

// CancelDelayed cancels tenant's task id while it is still PENDING: its
// record becomes CANCELLED and its schedule is removed. It returns
// [kv.ErrWrongState] when the task was released already.
func (c *Client) CancelDelayed(ctx context.Context, tenant, id string) error {
	ref := kv.Ref{Tenant: tenant, ID: id}
	if c.cfg.PublishOnly {
		return fmt.Errorf("cancel delayed task %s: %w", ref, ErrPublishOnly)
	}
	if _, _, err := c.store.Transition(ctx, ref, kv.StatePending, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil); err != nil {
		return fmt.Errorf("cancel delayed task: %w", err)
	}
	stream, err := c.js.Stream(ctx, c.cfg.Names.DelayedStream())
	if err == nil {
		err = stream.Purge(ctx, jetstream.WithPurgeSubject(c.cfg.Names.DelayedSubject(tenant, id)))
	}
	if err != nil {
		// The record is CANCELLED: the mover drops the schedule when it fires.
		return fmt.Errorf("cancel delayed task %s: cancelled, but its schedule was not removed: %w", ref, err)
	}
	return nil
}
