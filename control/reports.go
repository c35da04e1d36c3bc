package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/axtype"
	"github.com/nats-io/nats.go/jetstream"
)

// The reports the leader publishes in AX_CONTROL and the management API,
// `ax stats` and the dashboard read.

// Repair is one task the reconciler found lost and acted on.
type Repair struct {
	TaskID string       `json:"task_id"`
	Tenant string       `json:"tenant"` // the task's tenant: a task id belongs to its tenant
	State  axtype.State `json:"state"`  // the state it was found in
	// Action is "republished" (a copy of its payload now waits in its
	// bucket), "rescheduled" (its payload waits in AX_DELAYED for a future
	// run time: PENDING again) or "dead" (no payload left: DEAD with the
	// reason).
	Action string    `json:"action"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ReconcilerReport is what the reconciler publishes in AX_CONTROL under
// [ReconcilerKey]; `ax stats` and the dashboard show it. Counts are totals
// since the first leader ran it (each leader carries them on).
type ReconcilerReport struct {
	Leader    string    `json:"leader"`
	UpdatedAt time.Time `json:"updated_at"`
	// Tracked is the non-terminal records the leader watches.
	Tracked int `json:"tracked"`
	// Checked counts the checks made; Republished and Dead the repairs,
	// by the state the task was found in (PENDING, READY, RETRYING, RUNNING).
	Checked     uint64                  `json:"checked"`
	Republished map[axtype.State]uint64 `json:"republished"`
	Dead        map[axtype.State]uint64 `json:"dead"`
	// LastPass is how long the last pass took; LastPassChecked how many
	// records it checked.
	LastPass        axtype.Duration `json:"last_pass"`
	LastPassChecked int             `json:"last_pass_checked"`
	// Recent lists the last repairs, newest last (at most 20).
	Recent []Repair `json:"recent"`
}

// Repairs returns the total of repairs of both kinds.
func (r *ReconcilerReport) Repairs() uint64 {
	var n uint64
	for _, m := range []map[axtype.State]uint64{r.Republished, r.Dead} {
		for _, v := range m {
			n += v
		}
	}
	return n
}

// RejectedSubmit is one message published under a submit root that no
// priority bucket accepts: it was not stored and no task exists for it.
type RejectedSubmit struct {
	Subject string `json:"subject"`
	// Reason is streams.RejectTokens, streams.RejectPriority or
	// streams.RejectUnbound; Detail says it in a sentence.
	Reason string    `json:"reason"`
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
}

// RejectsReport is what the leader's watch of mistyped submit subjects
// publishes in AX_CONTROL under [RejectsKey]; `ax stats`, `ax rejects` and
// the dashboard show it. It counts only the subjects of
// [streams.Names.RejectWatchSubjects] (listed in Watching); a sample
// (`ax rejects --sample`) sees every shape. Counts are totals since the
// first leader ran the watch (each leader carries them on).
type RejectsReport struct {
	Leader    string    `json:"leader"`
	UpdatedAt time.Time `json:"updated_at"`
	// Total counts the rejected messages seen; ByReason splits it.
	Total    uint64            `json:"total"`
	ByReason map[string]uint64 `json:"by_reason"`
	// Dropped counts the messages the watch could not keep up with (its
	// buffer was full): they were rejected but are not in Total.
	Dropped  uint64   `json:"dropped"`
	Watching []string `json:"watching"`
	// Recent lists the last rejected messages, newest last (at most 20).
	Recent []RejectedSubmit `json:"recent"`
}

// Bounds of an unserved deadline.
const (
	MinUnservedDeadline = time.Second
	MaxUnservedDeadline = 366 * 24 * time.Hour
)

// AnyUnservedType is the key of [UnservedDeadlines] whose deadline applies to
// every type without one of its own, including types a producer made up.
const AnyUnservedType = "*"

// UnservedDeadlines is what AX_CONTROL holds under [UnservedDeadlinesKey]:
// per task type, how long its tasks may wait on a pools deployment while no
// live worker serves the type. Past it the leader dead-letters them with
// the reason, where `ax dlq replay` finds them. A type without a deadline
// (its own or [AnyUnservedType]'s) waits as long as it takes.
type UnservedDeadlines struct {
	Deadlines map[string]axtype.Duration `json:"deadlines"`
}

// ReadUnservedDeadlines reads the table of [UnservedDeadlines] from the
// control bucket and its revision (0: not written yet). The leader and the
// management API read it.
func ReadUnservedDeadlines(ctx context.Context, control jetstream.KeyValue) (UnservedDeadlines, uint64, error) {
	entry, err := control.Get(ctx, UnservedDeadlinesKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return UnservedDeadlines{Deadlines: map[string]axtype.Duration{}}, 0, nil
	}
	if err != nil {
		return UnservedDeadlines{}, 0, fmt.Errorf("read %s: %w", UnservedDeadlinesKey, err)
	}
	out := UnservedDeadlines{}
	if err := json.Unmarshal(entry.Value(), &out); err != nil {
		// The revision comes back with the error, so that a write can
		// replace the table by compare-and-set.
		return UnservedDeadlines{Deadlines: map[string]axtype.Duration{}}, entry.Revision(),
			fmt.Errorf("%w: %s: %w (set a deadline, e.g. `ax pools deadline TYPE 0`, to replace them)", ErrUndecodableDeadlines, UnservedDeadlinesKey, err)
	}
	if out.Deadlines == nil {
		out.Deadlines = map[string]axtype.Duration{}
	}
	return out, entry.Revision(), nil
}
