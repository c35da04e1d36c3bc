package ax

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultEarly is how long before its run time a delayed task's server-side
// schedule fires; the leader's mover then releases it at the exact time.
// The server fires schedules in bursts at most every 250 ms under load.
const DefaultEarly = streams.DefaultScheduleEarly

// submitDelayed stores a normalized delayed task: its PENDING record first,
// then its server-side schedule in AX_DELAYED, fired [Config.Early] before
// its run time ([move.CreatePending]). The record comes first so that a
// submit never replaces the schedule of another task with the same id: an
// id that exists is a duplicate, unless its record is this very task's (a
// retried submit).
func (c *Client) submitDelayed(ctx context.Context, t TaskSpec) (TaskInfo, error) {
	info := t.info(c.cfg.Names, 0, false)
	want := t.record("", 0)
	duplicate := false
	created, err := move.CreatePending(ctx, c.js, c.store, move.Pending{
		Record: want,
		Actor:  kv.Actor{Action: "submit"},
		Schedule: move.Schedule{Names: c.cfg.Names, Tenant: t.Tenant, ID: t.ID, Submit: t.message(c.cfg.Names, true),
			RunAt: t.RunAt, Early: c.cfg.Early, Limit: c.delayedLimit(level(t.Priority))},
		Existing: func(rec *kv.Record) bool {
			switch {
			case heldUnseen(rec) && rec.State == kv.StateCancelled:
				return false // the task its id was held for: cancelled before it came
			case heldUnseen(rec):
				// Paused before it came: its schedule waits; the mover keeps it
				// while the record is PAUSED, and releases it once a resume
				// has deleted the record (the id is unseen again).
				return true
			case !rec.SamePending(want):
				duplicate = true
				return false
			}
			return true
		},
		Retries: c.cfg.PublishRetries,
	})
	switch {
	case errors.Is(err, streams.ErrTooLarge):
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, fmt.Errorf("submit delayed task %s: %w: %w", t.ID, ErrInvalidTask, err)
	case err != nil && created.Record == nil:
		return info, fmt.Errorf("submit delayed task %s: %w", t.ID, err)
	case err != nil:
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && !created.Existed { // refused: nothing was scheduled, so the task was not accepted
			_ = c.store.Delete(ctx, want.Ref(), created.Revision)
		}
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, fmt.Errorf("submit delayed task %s: %w", t.ID, err)
	}
	info.Duplicate = duplicate
	return info, nil
}

// delayedLimit is the largest delayed task of priority prio
// ([move.DelayedLimit]): from the server's max_payload, and the bucket's
// MaxMsgSize as the last pressure report gave it. 0 when neither is known.
func (c *Client) delayedLimit(prio int) int {
	var maxMsgSize int32
	if p := c.pressure.Load(); p != nil {
		for _, b := range p.Buckets {
			if b.Priority == prio {
				maxMsgSize = b.MaxMsgSize
			}
		}
	}
	return move.DelayedLimit(c.js.Conn().MaxPayload(), maxMsgSize)
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
