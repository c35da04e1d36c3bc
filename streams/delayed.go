package streams

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of server-side message schedules (nats-server 2.12+, ADR-51). ax
// writes the schedule itself because nats.go's WithScheduleAt drops
// sub-second precision.
const (
	// HeaderSchedule is the schedule pattern, "@at <RFC3339Nano>".
	HeaderSchedule = "Nats-Schedule"
	// HeaderScheduleTarget is the subject the schedule fires into.
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderReleasedAt marks a task the leader released from AX_DELAYED
	// into its bucket (RFC 3339); a worker runs it without deferring again.
	HeaderReleasedAt = "Ax-Released-At"
)

// DelayedSubject returns the schedule subject of a delayed task, e.g.
// "ax.delayed.<id>". Re-publishing on it replaces the schedule; purging it
// cancels the schedule.
func (n Names) DelayedSubject(taskID string) string { return n.prefix + ".delayed." + taskID }

// DueSubject returns the subject a delayed task's schedule fires into,
// e.g. "ax.due.<id>".
func (n Names) DueSubject(taskID string) string { return n.prefix + ".due." + taskID }

// DueFilter returns the subjects of fired schedules, "ax.due.>".
func (n Names) DueFilter() string { return n.prefix + ".due.>" }

// EventSubject returns the subject of a control event, e.g. "ax.events.pressure".
func (n Names) EventSubject(kind string) string { return n.prefix + ".events." + kind }

// DelayedStreamConfig returns the configuration of AX_DELAYED: schedules on
// ax.delayed.<id> fire into ax.due.<id> in the same stream (a schedule's
// target must be in its stream). Limits retention: the leader's mover
// deletes each due message once it has released the task.
func DelayedStreamConfig(cfg *Config) jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	n := cfg.Names
	return jetstream.StreamConfig{
		Name:              n.DelayedStream(),
		Description:       "ax delayed tasks: schedules (ax.delayed.<id>) and fired schedules (ax.due.<id>)",
		Subjects:          []string{n.prefix + ".delayed.>", n.DueFilter()},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		MaxMsgs:           -1,
		MaxBytes:          cfg.DelayedMaxBytes,
		MaxMsgSize:        cfg.withHeaderRoom(),
		Duplicates:        cfg.Duplicates,
		AllowDirect:       true,
		AllowMsgSchedules: true,
		AllowRollup:       true,
	}
}

// DelayedMsg returns the schedule message of a delayed task: the task's
// submit message (subject in [HeaderSubject], headers and body kept) that
// the server fires into ax.due.<id> at fireAt. fireAt is a little before
// the task's run time (its Ax-Run-At header); the leader's mover releases
// it into its bucket at the exact time.
func (n Names) DelayedMsg(taskID string, submit *nats.Msg, fireAt time.Time) *nats.Msg {
	msg := nats.NewMsg(n.DelayedSubject(taskID))
	msg.Data = submit.Data
	for name, values := range submit.Header {
		msg.Header[name] = values
	}
	msg.Header.Del(HeaderMsgID) // the server strips it from fired messages anyway
	msg.Header.Set(HeaderTaskID, taskID)
	msg.Header.Set(HeaderSubject, submit.Subject)
	msg.Header.Set(HeaderSchedule, "@at "+fireAt.UTC().Format(time.RFC3339Nano))
	msg.Header.Set(HeaderScheduleTarget, n.DueSubject(taskID))
	return msg
}

// CopyMsgID is the Nats-Msg-Id of generation gen of a task re-published by
// the leader (released from AX_DELAYED or aged): a repeated move of one
// generation is de-duplicated, and no earlier copy's entry swallows it.
func CopyMsgID(taskID string, gen uint64) string { return fmt.Sprintf("%s:g%d", taskID, gen) }

// DefaultScheduleEarly is how long before a delayed task's run time its
// server-side schedule fires by default: the server fires schedules in
// bursts at most every 250 ms under load, and the leader releases the task
// at the exact time from its own timer.
const DefaultScheduleEarly = time.Second
