package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MoveSchedules moves a delayed task's schedule and fired schedule from the
// subjects of ax before v3, which named the task id alone (ax.delayed.<id>,
// ax.due.<id>), to its tenant's ([Names.DelayedSubject],
// [Names.DueSubject]): each is published again on the new subject (a
// schedule firing into the new due subject), then the old subject is
// purged. A task with neither is left alone. Run it with the mesh stopped,
// before the task's record moves (kv.MigrateKeys).
func MoveSchedules(ctx context.Context, js jetstream.JetStream, n Names, tenant, taskID string) error {
	stream, err := js.Stream(ctx, n.DelayedStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("move schedules of %s: %w", taskID, err)
	}
	moves := []struct{ from, to string }{
		{n.Prefix() + ".delayed." + taskID, n.DelayedSubject(tenant, taskID)},
		{n.Prefix() + ".due." + taskID, n.DueSubject(tenant, taskID)},
	}
	for _, m := range moves {
		old, err := stream.GetLastMsgForSubject(ctx, m.from)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("move schedules of %s: read %s: %w", taskID, m.from, err)
		}
		msg := nats.NewMsg(m.to)
		msg.Data = old.Data
		for name, values := range old.Header {
			if !strings.HasPrefix(name, "Nats-") { // the server's own, and the schedule's set below
				msg.Header[name] = values
			}
		}
		if at := old.Header.Get(HeaderSchedule); at != "" && strings.HasPrefix(m.from, n.Prefix()+".delayed.") {
			msg.Header.Set(HeaderSchedule, at)
			msg.Header.Set(HeaderScheduleTarget, n.DueSubject(tenant, taskID))
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("move schedules of %s: publish %s: %w", taskID, m.to, err)
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(m.from)); err != nil {
			return fmt.Errorf("move schedules of %s: purge %s: %w", taskID, m.from, err)
		}
	}
	return nil
}
