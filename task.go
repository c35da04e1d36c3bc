package ax

import (
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// DefaultTenant is the tenant of a task that names none.
const DefaultTenant = streams.DefaultTenant

// TaskSpec is what a producer builds: the task a service submits (a
// handler receives it as a worker.Task). Its JSON form (a cron job stores one)
// has snake_case keys, with Timeout and Delay in nanoseconds; the Go field
// names of records written before are read too.
type TaskSpec struct {
	// ID identifies the task; empty means a new nuid. Letters, digits, '-',
	// '_', '=' and '/' only. Re-submitting an id within the de-duplication
	// window is a no-op.
	ID string `json:"id,omitempty"`
	// Type names the handler. Required; a subject token.
	Type string `json:"type"`
	// Payload is passed to the handler as is.
	Payload []byte `json:"payload,omitempty"`
	// Priority names the bucket: [P0] (highest) to [P4] (lowest). The zero
	// value is [DefaultPriority] (P2).
	Priority Priority `json:"priority,omitempty"`
	// Tenant owns the task. Default "default".
	Tenant string `json:"tenant"`
	// Key partitions tasks into shards (tasks of one key share a shard).
	// Default: the task id.
	Key string `json:"key,omitempty"`
	// Timeout of one attempt. Zero: the worker's default for the type.
	Timeout time.Duration `json:"timeout,omitempty"`
	// MaxAttempts before the task is dead. Zero: the worker's default.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Core tasks are still accepted when backpressure refuses others. A core
	// task is published on <prefix>.core.p<N>.…, which only users allowed
	// to submit core tasks may publish (docs/ax-permissions.conf): being
	// core is a permission of the connection's user, not a claim.
	Core bool `json:"core,omitempty"`
	// Deadline after which the task is not started. Zero: none.
	Deadline time.Time `json:"deadline,omitzero"`
	// Headers are extra "Ax-" headers passed to the handler, and the W3C
	// trace context ("traceparent", "tracestate", well formed) the task's
	// spans continue.
	Headers map[string]string `json:"headers,omitempty"`
	// RunAt delays the task until this time: it is PENDING until then and
	// the leader releases it into its bucket at RunAt. Zero, or a time not
	// after now, runs it at once. Not together with Delay.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay delays the task by this long (RunAt = now + Delay). Zero runs it
	// at once; negative is an error. Not together with RunAt.
	Delay time.Duration `json:"delay,omitempty"`
	// Unique, when set, makes the submit publish nothing while a task of
	// the same tenant, type and unique key submitted within the period is
	// in one of the chosen states: it returns that task, with
	// [TaskInfo.UniqueSkipped] set. See [UniqueOpts].
	Unique *UniqueOpts `json:"unique,omitempty"`

	// hookHeader holds the headers the submit hooks set ([SubmitHook]).
	hookHeader nats.Header
	// claimRecords is set by normalize on a task whose id it made and whose
	// key is that id: its record is written by the worker that claims it
	// (docs/decisions/record-at-claim.md).
	claimRecords bool
}

// TaskInfo describes an accepted task ([axtype.TaskInfo]).
type TaskInfo = axtype.TaskInfo

// normalize fills defaults and validates the task, naming the bad field.
func (t TaskSpec) normalize(now time.Time) (TaskSpec, error) {
	if t.ID == "" && t.Key == "" && t.Unique == nil && t.RunAt.IsZero() && t.Delay == 0 {
		t.claimRecords = true
	}
	if t.ID == "" {
		t.ID = nuid.Next()
	}
	if t.Tenant == "" {
		t.Tenant = DefaultTenant
	}
	if t.Key == "" {
		t.Key = t.ID
	}
	bad := func(format string, args ...any) (TaskSpec, error) {
		return t, fmt.Errorf("%w: %s", ErrInvalidTask, fmt.Sprintf(format, args...))
	}
	if err := streams.ValidateTaskID(t.ID); err != nil {
		return bad("ID: %s", err)
	}
	for _, f := range []struct{ name, value string }{{"Type", t.Type}, {"Tenant", t.Tenant}, {"Key", t.Key}} {
		if err := streams.ValidateToken(f.name, f.value); err != nil {
			return bad("%s", err)
		}
	}
	level, err := t.Priority.Level()
	if err != nil {
		return bad("Priority %q is not p0..p%d (empty: %s)", t.Priority, streams.Priorities-1, DefaultPriority)
	}
	t.Priority = PriorityOf(level)
	switch {
	case t.Timeout < 0:
		return bad("Timeout %s is negative", t.Timeout)
	case t.MaxAttempts < 0 || t.MaxAttempts > streams.MaxAttemptsLimit:
		return bad("MaxAttempts %d is not 0..%d", t.MaxAttempts, streams.MaxAttemptsLimit)
	case !t.Deadline.IsZero() && t.Deadline.Before(now):
		return bad("Deadline %s is in the past", t.Deadline.Format(time.RFC3339))
	case t.Delay < 0:
		return bad("Delay %s is negative", t.Delay)
	case t.Delay > 0 && !t.RunAt.IsZero():
		return bad("Delay and RunAt are both set; set one")
	}
	if t.Unique != nil {
		u, err := t.Unique.normalize()
		if err != nil {
			return bad("%s", err)
		}
		t.Unique = u
	}
	if t.Delay > 0 {
		t.RunAt, t.Delay = now.Add(t.Delay), 0
	}
	if !t.RunAt.After(now) {
		t.RunAt = time.Time{} // due now: no delay
	}
	for name, value := range t.Headers {
		if name == streams.HeaderTraceParent || name == streams.HeaderTraceState {
			// A W3C trace context the task's spans continue (a workflow's
			// tasks carry the workflow's).
			if !streams.ValidTrace(name, value) {
				return bad("header %q: %q is not a well-formed W3C trace context value", name, value)
			}
			continue
		}
		if streams.IsInternalHeader(name) || isOptionHeader(name) {
			return bad("header %q is set by ax, not by a task (use the Task fields for its options)", name)
		}
		if !strings.HasPrefix(name, "Ax-") {
			return bad("header %q must start with \"Ax-\"", name)
		}
	}
	return t, nil
}

// isOptionHeader reports whether name carries a task option that a
// [TaskSpec] field sets (a header would silently fight the field).
func isOptionHeader(name string) bool {
	for _, h := range []string{streams.HeaderTimeout, streams.HeaderMaxAttempts, streams.HeaderCore, streams.HeaderDeadline, streams.HeaderRunAt, streams.HeaderMsgID} {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// message builds the wire message of a normalized task. recorded says its
// submitter writes the task's record (Ax-Gen 1, the record's generation);
// a publish-only client's message carries no Ax-Gen, as a raw publish, so
// that the worker that first sees it creates the record at once instead
// of waiting for one that never comes.
func (t TaskSpec) message(names streams.Names, recorded bool) *nats.Msg {
	subject := names.SubmitSubject(level(t.Priority), t.Tenant, t.Type, t.Key)
	if t.Core {
		subject = names.CoreSubject(level(t.Priority), t.Tenant, t.Type, t.Key)
	}
	msg := nats.NewMsg(subject)
	msg.Data = t.Payload
	for name, value := range t.Headers {
		msg.Header.Set(name, value)
	}
	for name, values := range t.hookHeader {
		msg.Header[name] = values
	}
	var gen uint64
	if recorded {
		gen = 1
	}
	streams.Options{ID: t.ID, Timeout: t.Timeout, MaxAttempts: t.MaxAttempts, Deadline: t.Deadline, RunAt: t.RunAt, Gen: gen}.SetHeaders(msg.Header)
	// JetStream de-duplicates by Nats-Msg-Id across tenants: a token of this
	// submit's own keeps another tenant's publish of the id, within the
	// window, from making this one a "duplicate". Its retries (the same
	// message) are still de-duplicated; the id is de-duplicated per tenant
	// by its record.
	msg.Header.Set(streams.HeaderMsgID, t.ID+":"+nuid.Next())
	return msg
}

// record is the READY record of a normalized task (PENDING if delayed).
func (t TaskSpec) record(stream string, seq uint64) *kv.Record {
	state := kv.StateReady
	if !t.RunAt.IsZero() {
		state = kv.StatePending
	}
	rec := &kv.Record{
		ID: t.ID, Type: t.Type, Tenant: t.Tenant, Key: t.Key, Priority: level(t.Priority),
		State: state, MaxAttempts: t.MaxAttempts, Timeout: kv.Duration(t.Timeout),
		Core: t.Core,
	}
	rec.Bind(1, stream, seq)
	if !t.Deadline.IsZero() {
		d := t.Deadline.UTC()
		rec.Deadline = &d
	}
	if !t.RunAt.IsZero() {
		r := t.RunAt.UTC()
		rec.RunAt = &r
	}
	return rec
}

func (t TaskSpec) info(names streams.Names, seq uint64, dup bool) TaskInfo {
	return TaskInfo{
		ID: t.ID, Type: t.Type, Tenant: t.Tenant, Priority: PriorityOf(level(t.Priority)), Shard: streams.Shard(t.Key),
		Stream: names.PriorityStream(level(t.Priority)), Sequence: seq, Duplicate: dup, RunAt: t.RunAt,
	}
}
