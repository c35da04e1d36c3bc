package streams

import (
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
)

// Wire headers of the contract (docs/WIRE.md).
const (
	// HeaderMsgID is the JetStream de-duplication header; ax uses it as the
	// task id: "<id>", or "<id>:<token>", whose token (anything unguessable,
	// such as a NUID) only de-duplicates ([TaskIDOf]).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderTimeout is the task timeout as a Go duration ("30s").
	HeaderTimeout = "Ax-Timeout"
	// HeaderMaxAttempts is the maximum number of attempts (a positive integer).
	HeaderMaxAttempts = "Ax-Max-Attempts"
	// HeaderCore is a producer's claim of a core task. It grants
	// nothing: a core task is one published on the core subject
	// ([Names.CoreSubject]), which takes a permission. A message that still
	// carries it is handled as if it did not.
	HeaderCore = "Ax-Core"
	// HeaderDeadline is the RFC 3339 time after which the task is not started.
	HeaderDeadline = "Ax-Deadline"
	// HeaderRunAt is the RFC 3339 time a delayed task becomes due.
	HeaderRunAt = "Ax-Run-At"
	// HeaderGen is the task's dispatch generation; a message behind the
	// record's generation is dropped.
	HeaderGen = "Ax-Gen"
	// HeaderWaitingSince (RFC 3339) is when an aged task first began to
	// wait; a worker runs the longest-waiting task of a priority first.
	HeaderWaitingSince = "Ax-Waiting-Since"
	// HeaderError carries the failure reason on a dead letter.
	HeaderError = "Ax-Error"
	// HeaderAttempts carries the attempts made on a dead letter.
	HeaderAttempts = "Ax-Attempts"
	// HeaderFailedAt carries the RFC 3339 failure time on a dead letter.
	HeaderFailedAt = "Ax-Failed-At"
	// HeaderPayloadTruncated marks a dead letter whose payload was too large
	// to keep next to its failure headers; the value is the original size.
	HeaderPayloadTruncated = "Ax-Payload-Truncated"
	// HeaderTaskID carries the task id on a dead letter and on a copy of a
	// task re-published by the leader (released or aged) or an operator
	// (resume, reprioritize, replay), whose Nats-Msg-Id is "<id>:g<gen>";
	// when present it is the task id.
	HeaderTaskID = "Ax-Task-Id"
	// HeaderSubject carries the original subject on a dead letter, and the
	// submit subject on a delayed task's schedule.
	HeaderSubject = "Ax-Subject"
	// HeaderCron names the cron job whose fire submitted the task. The
	// leader sets it on every cron task; it is an ordinary kept header
	// (a handler reads it in Task.Headers), informative only: nothing in
	// ax acts on it.
	HeaderCron = "Ax-Cron"
	// HeaderRelease carries why the leader released a workflow's task (the
	// parent whose success released it): the worker whose claim creates the
	// task's record writes it as the note of the record's first move
	// (action "release"). Informative only, like Ax-Cron: a producer's
	// publish of its own tenant's task can set it too, and nothing in ax
	// acts on it.
	HeaderRelease = "Ax-Release"
	// HeaderCronTime is the fire's scheduled time (RFC 3339 with
	// nanoseconds, UTC) on a cron task, beside [HeaderCron].
	HeaderCronTime = "Ax-Cron-Time"
)

// InternalHeaders returns the headers only ax may set: they are honoured
// on a control-plane copy ([Names.CopySubject]) or a dead letter, ignored
// on a producer's message and never copied from it ([KeptHeaders]). A
// producer (and the Go client's Task.Headers) may not set them.
func InternalHeaders() []string {
	return []string{HeaderTaskID, HeaderGen, HeaderWaitingSince, HeaderReleasedAt,
		HeaderError, HeaderAttempts, HeaderFailedAt, HeaderSubject, HeaderPayloadTruncated, HeaderAside}
}

// IsInternalHeader reports whether name is one of [InternalHeaders]
// (canonical form, as nats.Header keys are).
func IsInternalHeader(name string) bool {
	for _, h := range InternalHeaders() {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// Default upper bounds of a task's options; workers and clients take their
// own (worker.Config and ax.Config MaxTimeout, MaxDelay).
const (
	// DefaultMaxTimeout bounds Ax-Timeout: 24 hours.
	DefaultMaxTimeout = 24 * time.Hour
	// DefaultMaxDelay bounds how far ahead Ax-Run-At may be: 366 days.
	DefaultMaxDelay = 366 * 24 * time.Hour
)

// CheckBounds reports an option of o above its bound (now is the time the
// run time is measured from), naming the header and the bound.
func CheckBounds(o Options, now time.Time, maxTimeout, maxDelay time.Duration) error {
	if maxTimeout > 0 && o.Timeout > maxTimeout {
		return fmt.Errorf("%w: %s %s is above the limit %s", ErrBadHeader, HeaderTimeout, o.Timeout, maxTimeout)
	}
	if maxDelay > 0 && !o.RunAt.IsZero() && o.RunAt.Sub(now) > maxDelay {
		return fmt.Errorf("%w: %s %s is more than %s ahead", ErrBadHeader, HeaderRunAt, o.RunAt.UTC().Format(time.RFC3339), maxDelay)
	}
	return nil
}

// MaxAttemptsLimit bounds the Ax-Max-Attempts header.
const MaxAttemptsLimit = 1000

// MaxGen bounds the Ax-Gen header (2^53): a generation is a counter that
// grows by one per move, so a larger value is not one ax wrote, and the
// next copy's generation must not wrap around to 0.
const MaxGen = 1 << 53

// ValidateToken reports whether value is a usable subject token: non-empty,
// printable, without '.', '*', '>' or whitespace. The error names field.
func ValidateToken(field, value string) error {
	if value == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidToken, field)
	}
	if len(value) > 256 {
		return fmt.Errorf("%w: %s is longer than 256 bytes", ErrInvalidToken, field)
	}
	for _, r := range value {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %s %q contains %q (no '.', '*', '>', whitespace or control characters)", ErrInvalidToken, field, value, r)
		}
	}
	return nil
}

// ValidateTaskID reports whether id can name a task: a subject token that is
// also a valid KV key (letters, digits, '-', '_', '=', '/').
func ValidateTaskID(id string) error {
	if err := ValidateToken("task id", id); err != nil {
		return err
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=' || r == '/') {
			return fmt.Errorf("%w: task id %q contains %q (allowed: letters, digits, '-', '_', '=', '/')", ErrInvalidToken, id, r)
		}
	}
	return nil
}

// Stored is a task subject as stored in a priority stream.
type Stored struct {
	Priority int
	Shard    int
	Tenant   string
	Type     string
	Key      string
	// Copy is true for a control-plane copy ([Names.CopySubject]), whose
	// internal headers are honoured.
	Copy bool
}

// ParseStored parses a stored subject "<prefix>.p<N>.<shard>.<tenant>.<type>.<key>",
// or a control-plane copy's, which ends in ".ctl".
func (n Names) ParseStored(subject string) (Stored, error) {
	tokens := strings.Split(subject, ".")
	isCopy := len(tokens) == 7 && tokens[6] == controlToken
	if isCopy {
		tokens = tokens[:6]
	}
	if len(tokens) != 6 || tokens[0] != n.Prefix() {
		return Stored{}, fmt.Errorf("%w: %q is not %s.p<N>.<shard>.<tenant>.<type>.<key>", ErrBadSubject, subject, n.Prefix())
	}
	priority, err := ParsePriority(tokens[1])
	if err != nil {
		return Stored{}, fmt.Errorf("%w: subject %q: %w", ErrBadSubject, subject, err)
	}
	shard, err := strconv.Atoi(tokens[2])
	if err != nil || shard < 0 || shard >= Shards || strconv.Itoa(shard) != tokens[2] { // as the transform writes it: no sign, no leading zero
		return Stored{}, fmt.Errorf("%w: subject %q: shard %q is not 0..%d", ErrBadSubject, subject, tokens[2], Shards-1)
	}
	s := Stored{Priority: priority, Shard: shard, Tenant: tokens[3], Type: tokens[4], Key: tokens[5], Copy: isCopy}
	for _, f := range []struct{ name, value string }{{"tenant", s.Tenant}, {"type", s.Type}, {"key", s.Key}} {
		if err := ValidateToken(f.name, f.value); err != nil {
			return Stored{}, fmt.Errorf("%w: subject %q: %w", ErrBadSubject, subject, err)
		}
	}
	return s, nil
}

// ParseMessage reads what a stored message says about its task: its
// subject, and the options of its headers ([ParseCopyHeaders] on a
// control-plane copy, else [ParseHeaders]). On a subject error the options
// are still read, as a producer's.
func (n Names) ParseMessage(subject string, h nats.Header) (Stored, Options, error) {
	s, err := n.ParseStored(subject)
	parse := ParseHeaders
	if err == nil && s.Copy {
		parse = ParseCopyHeaders
	}
	o, herr := parse(h)
	return s, o, errors.Join(err, herr)
}

// FallbackID names a task published without a Nats-Msg-Id: its bucket,
// sequence and store time, so that a bucket recreated later (sequences start
// again at 1) never gives a new task the id of an old one.
func FallbackID(stream string, seq uint64, stored time.Time) string {
	return fmt.Sprintf("%s-%d-%x", stream, seq, stored.UnixNano())
}

// ParseSubmit parses a submit subject "<prefix>.submit.p<N>.<tenant>.<type>.<key>"
// or a core submit subject "<prefix>.core.p<N>.<tenant>.<type>.<key>".
func (n Names) ParseSubmit(subject string) (Stored, error) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != 6 || tokens[0] != n.Prefix() || (tokens[1] != "submit" && tokens[1] != "core") {
		return Stored{}, fmt.Errorf("%w: %q is not %s.submit.p<N>.<tenant>.<type>.<key> (or %s.core.…)", ErrBadSubject, subject, n.Prefix(), n.Prefix())
	}
	priority, err := ParsePriority(tokens[2])
	if err != nil {
		return Stored{}, fmt.Errorf("%w: subject %q: %w", ErrBadSubject, subject, err)
	}
	s := Stored{Priority: priority, Tenant: tokens[3], Type: tokens[4], Key: tokens[5], Shard: Shard(tokens[5])}
	for _, f := range []struct{ name, value string }{{"tenant", s.Tenant}, {"type", s.Type}, {"key", s.Key}} {
		if err := ValidateToken(f.name, f.value); err != nil {
			return Stored{}, fmt.Errorf("%w: subject %q: %w", ErrBadSubject, subject, err)
		}
	}
	return s, nil
}

// ParsePriority parses "p0".."p4" ([axtype.ParsePriority]).
func ParsePriority(token string) (int, error) { return axtype.ParsePriority(token) }

// Options are the task options a message carries in its headers. Zero values
// mean "not set".
type Options struct {
	ID          string
	Timeout     time.Duration
	MaxAttempts int
	Deadline    time.Time
	RunAt       time.Time
	Gen         uint64
}

// ParseCopyHeaders reads the options of a control-plane copy
// ([Names.CopySubject]): those of [ParseHeaders], plus the internal headers
// only the control plane may set: the task id from Ax-Task-Id (its
// Nats-Msg-Id names the copy) and the generation from Ax-Gen. Never use it
// on a message a producer could have published.
func ParseCopyHeaders(h nats.Header) (Options, error) {
	copyHeaders := nats.Header{}
	for name, values := range h {
		if name != HeaderMsgID {
			copyHeaders[name] = values
		}
	}
	o, err := ParseHeaders(copyHeaders)
	if err != nil {
		return o, err
	}
	v := h.Get(HeaderTaskID)
	if err := ValidateTaskID(v); err != nil {
		return o, fmt.Errorf("%w: %s: %w", ErrBadHeader, HeaderTaskID, err)
	}
	o.ID = v
	if v := h.Get(HeaderGen); v != "" {
		g, err := strconv.ParseUint(v, 10, 64)
		if err != nil || g > MaxGen {
			return o, fmt.Errorf("%w: %s %q is not an integer in 0..%d", ErrBadHeader, HeaderGen, v, uint64(MaxGen))
		}
		o.Gen = g
	}
	return o, nil
}

// TaskIDOf returns the task id a Nats-Msg-Id names: the part before its
// first ':'. JetStream de-duplicates by the whole Nats-Msg-Id, per stream
// and across tenants, so a producer that adds an unguessable token (the Go
// client adds a NUID per submit) cannot have its publish taken for another
// tenant's within the de-duplication window; ax de-duplicates the task id
// per tenant by its record.
func TaskIDOf(msgID string) string {
	id, _, _ := strings.Cut(msgID, ":")
	return id
}

// ParseHeaders reads the task options a producer may set (docs/WIRE.md)
// from h: the task id (Nats-Msg-Id, [TaskIDOf]), timeout, attempts, core, deadline and
// run time. Internal headers (Ax-Task-Id, Ax-Gen, …) are ignored: they are
// honoured only on a control-plane copy ([ParseCopyHeaders]). An invalid
// header is an error that names it and says what is expected; a missing
// header leaves its option unset.
func ParseHeaders(h nats.Header) (Options, error) {
	var o Options
	if v := h.Get(HeaderMsgID); v != "" {
		id := TaskIDOf(v)
		if err := ValidateTaskID(id); err != nil {
			return o, fmt.Errorf("%w: %s: %w", ErrBadHeader, HeaderMsgID, err)
		}
		o.ID = id
	}
	if v := h.Get(HeaderTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("%w: %s %q is not a positive Go duration such as \"30s\"", ErrBadHeader, HeaderTimeout, v)
		}
		o.Timeout = d
	}
	if v := h.Get(HeaderMaxAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxAttemptsLimit {
			return o, fmt.Errorf("%w: %s %q is not an integer in 1..%d", ErrBadHeader, HeaderMaxAttempts, v, MaxAttemptsLimit)
		}
		o.MaxAttempts = n
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{HeaderDeadline, &o.Deadline}, {HeaderRunAt, &o.RunAt}} {
		if v := h.Get(f.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return o, fmt.Errorf("%w: %s %q is not an RFC 3339 time such as \"2026-01-02T15:04:05Z\"", ErrBadHeader, f.name, v)
			}
			*f.dst = t
		}
	}
	return o, nil
}

// SetHeaders writes o into h (the inverse of [ParseHeaders]).
func (o Options) SetHeaders(h nats.Header) {
	if o.ID != "" {
		h.Set(HeaderMsgID, o.ID)
	}
	if o.Timeout > 0 {
		h.Set(HeaderTimeout, o.Timeout.String())
	}
	if o.MaxAttempts > 0 {
		h.Set(HeaderMaxAttempts, strconv.Itoa(o.MaxAttempts))
	}
	if !o.Deadline.IsZero() {
		h.Set(HeaderDeadline, o.Deadline.UTC().Format(time.RFC3339Nano))
	}
	if !o.RunAt.IsZero() {
		h.Set(HeaderRunAt, o.RunAt.UTC().Format(time.RFC3339Nano))
	}
	if o.Gen > 0 {
		h.Set(HeaderGen, strconv.FormatUint(o.Gen, 10))
	}
}
