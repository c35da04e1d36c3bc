package streams

import (
	"fmt"
	"strconv"
	"strings"
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
	// HeaderAside marks the schedule of a task a worker moved aside
	// for a pause of its type or tenant, "paused": the leader's look for
	// the tasks to release when a pause ends reads only the records of
	// the schedules that carry it (a forged one costs a record read; the
	// record decides).
	HeaderAside = "Ax-Aside"
	// AsidePaused is [HeaderAside]'s value on a task paused aside.
	AsidePaused = "paused"
	// HeaderReleasedAt marks a task the leader released from AX_DELAYED
	// into its bucket (RFC 3339); a worker runs it without deferring again.
	HeaderReleasedAt = "Ax-Released-At"
)

// DelayedSubject returns the schedule subject of tenant's delayed task,
// "ax.delayed.<tenant>.<id>" (a task id belongs to its tenant).
// Re-publishing on it replaces the schedule; purging it cancels the
// schedule.
func (n Names) DelayedSubject(tenant, taskID string) string {
	return n.Prefix() + ".delayed." + tenant + "." + taskID
}

// DueSubject returns the subject tenant's delayed task's schedule fires
// into, "ax.due.<tenant>.<id>".
func (n Names) DueSubject(tenant, taskID string) string {
	return n.Prefix() + ".due." + tenant + "." + taskID
}

// ParseDueSubject returns the tenant and task id of a fired schedule's
// subject "ax.due.<tenant>.<id>", and false if subject is not one.
func (n Names) ParseDueSubject(subject string) (tenant, taskID string, ok bool) {
	return n.parseTaskSubject(subject, ".due.")
}

// ParseDelayedSubject returns the tenant and task id of a schedule's
// subject "ax.delayed.<tenant>.<id>" ([Names.DelayedSubject]), and false
// if subject is not one.
func (n Names) ParseDelayedSubject(subject string) (tenant, taskID string, ok bool) {
	return n.parseTaskSubject(subject, ".delayed.")
}

// DelayedFilter returns the subjects of the schedules, "ax.delayed.>".
func (n Names) DelayedFilter() string { return n.Prefix() + ".delayed.>" }

func (n Names) parseTaskSubject(subject, infix string) (tenant, taskID string, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.Prefix()+infix)
	if !ok {
		return "", "", false
	}
	tenant, taskID, ok = strings.Cut(rest, ".")
	if !ok || ValidateToken("tenant", tenant) != nil || ValidateTaskID(taskID) != nil {
		return "", "", false
	}
	return tenant, taskID, true
}

// DueFilter returns the subjects of fired schedules, "ax.due.>".
func (n Names) DueFilter() string { return n.Prefix() + ".due.>" }

// EventSubject returns the subject of a control event, e.g. "ax.events.pressure".
func (n Names) EventSubject(kind string) string { return n.Prefix() + ".events." + kind }

// DelayedStreamConfig returns the configuration of AX_DELAYED: schedules on
// ax.delayed.<tenant>.<id> fire into ax.due.<tenant>.<id> in the same stream (a schedule's
// target must be in its stream). Limits retention: the leader's mover
// deletes each due message once it has released the task.
func DelayedStreamConfig(cfg *Config) jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	n := cfg.Names
	return jetstream.StreamConfig{
		Name:              n.DelayedStream(),
		Description:       "ax delayed tasks: schedules (ax.delayed.<tenant>.<id>) and fired schedules (ax.due.<tenant>.<id>)",
		Subjects:          []string{n.DelayedFilter(), n.DueFilter()},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		MaxMsgs:           -1,
		MaxBytes:          cfg.DelayedMaxBytes,
		MaxMsgSize:        cfg.withHeaderRoom(),
		Duplicates:        DefaultDuplicates,
		AllowDirect:       true,
		AllowMsgSchedules: true,
		AllowRollup:       true,
	}
}

// DelayedMsg returns the schedule message of tenant's delayed task: the
// task's submit message (payload and [KeptHeaders]; its subject in
// [HeaderSubject]) that the server fires into ax.due.<tenant>.<id> at
// fireAt. No other header of the submit is copied: the server acts on the
// schedule's "Nats-" headers (a Nats-Schedule-Source would make it fire
// with another task's payload). fireAt is a little before the task's run
// time (its Ax-Run-At header); the leader's mover releases it into its
// bucket at the exact time.
func (n Names) DelayedMsg(tenant, taskID string, submit *nats.Msg, fireAt time.Time) *nats.Msg {
	msg := nats.NewMsg(n.DelayedSubject(tenant, taskID))
	msg.Data = submit.Data
	msg.Header = KeptHeaders(submit.Header)
	msg.Header.Set(HeaderTaskID, taskID)
	msg.Header.Set(HeaderSubject, submit.Subject)
	msg.Header.Set(HeaderSchedule, "@at "+fireAt.UTC().Format(time.RFC3339Nano))
	msg.Header.Set(HeaderScheduleTarget, n.DueSubject(tenant, taskID))
	return msg
}

// CopyMsgID is the Nats-Msg-Id of one publish of a copy of a task at
// generation gen (released from AX_DELAYED, aged, resumed, reprioritized,
// replayed or recovered). attempt must be unique to the move that publishes
// it (a NUID): a retried publish of the same move is de-duplicated, while a
// later move never meets the de-duplication entry of an earlier one. (A
// copy id shared between moves is unsafe: JetStream answers a publish whose
// id it has seen with the earlier message's sequence, even when that
// message was deleted, so a second move would point its record at nothing.)
func CopyMsgID(taskID string, gen uint64, attempt string) string {
	return fmt.Sprintf("%s:g%d:%s", taskID, gen, attempt)
}

// DefaultScheduleEarly is how long before a delayed task's run time its
// server-side schedule fires by default: the server fires schedules in
// bursts at most every 250 ms under load, and the leader releases the task
// at the exact time from its own timer.
const DefaultScheduleEarly = time.Second

// TaskCopy builds a control-plane copy of a task's message for subject: the
// payload and the [KeptHeaders] of from (minus drop), with the task id,
// the generation and a Nats-Msg-Id unique to this move ([CopyMsgID]). Every
// place that re-publishes a task (release, aging, resume, reprioritize,
// replay, recovery) builds its copy here.
func TaskCopy(subject string, data []byte, from nats.Header, taskID string, gen uint64, attempt string, drop ...string) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header = KeptHeaders(from)
	for _, name := range drop {
		msg.Header.Del(name)
	}
	msg.Header.Set(HeaderTaskID, taskID)
	msg.Header.Set(HeaderGen, strconv.FormatUint(gen, 10))
	msg.Header.Set(HeaderMsgID, CopyMsgID(taskID, gen, attempt))
	return msg
}
