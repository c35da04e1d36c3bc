package scheduler

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

// submitDelayed stores a normalized delayed task as a server-side schedule
// in AX_DELAYED, fired [Config.Early] before its run time, and writes its
// PENDING record.
func (c *Client) submitDelayed(ctx context.Context, t Task) (TaskInfo, error) {
	msg := c.cfg.Names.DelayedMsg(t.ID, t.message(c.cfg.Names), t.RunAt.Add(-c.cfg.Early))
	var err error
	for attempt := 0; ; attempt++ {
		_, err = c.js.PublishMsg(ctx, msg)
		if err == nil || !retryable(err) || attempt >= c.cfg.PublishRetries || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return TaskInfo{ID: t.ID}, fmt.Errorf("submit delayed task %s: %w", t.ID, err)
	}
	info := t.info(c.cfg.Names, 0, false)
	_, _, err = c.store.Create(ctx, t.record(0), kv.Actor{Action: "submit"})
	if errors.Is(err, kv.ErrExists) {
		// Submitted before: the schedule was replaced by the same task.
		info.Duplicate, err = true, nil
	}
	if err != nil {
		return info, fmt.Errorf("submit delayed task %s: scheduled, but its record was not written: %w", t.ID, err)
	}
	return info, nil
}

// CancelDelayed cancels a task that is still PENDING: its record becomes
// CANCELLED and its schedule is removed. It returns [kv.ErrWrongState] when
// the task was released already.
func (c *Client) CancelDelayed(ctx context.Context, id string) error {
	if _, _, err := c.store.Transition(ctx, id, kv.StatePending, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil); err != nil {
		return fmt.Errorf("cancel delayed task: %w", err)
	}
	stream, err := c.js.Stream(ctx, c.cfg.Names.DelayedStream())
	if err == nil {
		err = stream.Purge(ctx, jetstream.WithPurgeSubject(c.cfg.Names.DelayedSubject(id)))
	}
	if err != nil {
		// The record is CANCELLED: the mover drops the schedule when it fires.
		return fmt.Errorf("cancel delayed task %s: cancelled, but its schedule was not removed: %w", id, err)
	}
	return nil
}
