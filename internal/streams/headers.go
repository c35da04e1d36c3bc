package streams

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TaskRoom is the most ax adds to a task's message (its payload and
// [KeptHeaders]) in a write of its own: a control-plane copy (Ax-Task-Id,
// Ax-Gen, Nats-Msg-Id, Ax-Released-At, Ax-Waiting-Since) or a schedule
// (Ax-Task-Id, Ax-Subject, Nats-Schedule, Nats-Schedule-Target), with task
// ids and subject tokens of their largest size (256 bytes). A delayed
// task's message must leave it below its bucket's MaxMsgSize: the leader
// releases it as a copy into that bucket.
const TaskRoom = 4 << 10

// maxHeaderBytes is the largest header block the server stores (64 KiB
// less one: nats-server's JSStreamHeaderExceedsMaximumErr).
const maxHeaderBytes = 1<<16 - 1

// KeptHeaders returns the headers of a task's message that ax carries into
// its own writes (a schedule, a control-plane copy, a dead letter): the
// options of the wire contract a producer may set ([HeaderTimeout],
// [HeaderMaxAttempts], [HeaderCore], [HeaderDeadline], [HeaderRunAt]) and
// the other "Ax-" headers, passed to the handler, and a well-formed W3C
// trace context ([HeaderTraceParent], [HeaderTraceState]), so that a
// task's trace runs through its copies. Nothing else of a
// producer's is copied: no "Nats-" header (the server acts on many: a
// schedule's source, target and TTL, rollups, expected-state checks,
// tracing), no [InternalHeaders] (the writer sets its own), no header
// spelled otherwise (headers are case-sensitive on the wire), and no value
// with a line break. The writer adds its own headers after.
func KeptHeaders(h nats.Header) nats.Header {
	kept := nats.Header{}
	for name, values := range h {
		if name == HeaderTraceParent || name == HeaderTraceState {
			if v := keptTrace(name, values); v != "" {
				kept[name] = []string{v}
			}
			continue
		}
		if !keptName(name) {
			continue
		}
		for _, v := range values {
			if !strings.ContainsAny(v, "\r\n") {
				kept[name] = append(kept[name], v)
			}
		}
	}
	return kept
}

// The W3C trace context headers a task's message may carry: kept, when
// well formed, so that a task's trace goes on through its copies.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// TraceID returns the trace id of the well-formed traceparent h carries
// (32 hex digits), or "".
func TraceID(h nats.Header) string {
	if v := keptTrace(HeaderTraceParent, h.Values(HeaderTraceParent)); v != "" {
		return v[3:35]
	}
	return ""
}

// ValidTrace reports whether value is a well-formed value of the W3C trace
// context header name ([HeaderTraceParent] or [HeaderTraceState]), one
// that ax keeps.
func ValidTrace(name, value string) bool {
	return (name == HeaderTraceParent || name == HeaderTraceState) && keptTrace(name, []string{value}) != ""
}

// keptTrace returns the one value of a trace context header that is kept:
// a traceparent of the W3C form (version 00: "00-" 32 hex digits "-" 16
// hex digits "-" 2 hex digits, ids not all zero), a tracestate of at most
// 512 printable ASCII characters; "" otherwise, or when the header is
// repeated.
func keptTrace(name string, values []string) string {
	if len(values) != 1 {
		return ""
	}
	v := values[0]
	if name == HeaderTraceState {
		if len(v) > 512 {
			return ""
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return ""
			}
		}
		return v
	}
	if len(v) != 55 || v[:3] != "00-" || v[35] != '-' || v[52] != '-' {
		return ""
	}
	for i, c := range []byte(v) {
		if i < 3 || i == 35 || i == 52 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	if v[3:35] == strings.Repeat("0", 32) || v[36:52] == strings.Repeat("0", 16) {
		return ""
	}
	return v
}

// keptName reports whether a header named name is kept: "Ax-" followed by
// letters, digits and '-', not an internal header.
func keptName(name string) bool {
	rest, ok := strings.CutPrefix(name, "Ax-")
	if !ok || rest == "" || IsInternalHeader(name) {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// HeaderBytes is the size of h as written on the wire ("NATS/1.0\r\n",
// one "Name: value\r\n" line per value, a closing "\r\n"); 0 when h is
// empty.
func HeaderBytes(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for name, values := range h {
		for _, v := range values {
			n += len(name) + len(": \r\n") + len(v)
		}
	}
	return n
}

// CheckDelayedSize refuses a delayed task whose message would not fit ax's
// writes of it: its payload and [KeptHeaders] plus [TaskRoom] must be at
// most limit (the least of its bucket's MaxMsgSize and the server's
// max_payload; limit <= 0 checks only the header bound), and its kept
// headers plus TaskRoom at most the server's header bound (64 KiB). The
// error wraps [ErrTooLarge] and names the sizes.
func CheckDelayedSize(data []byte, h nats.Header, limit int) error {
	hdr := HeaderBytes(KeptHeaders(h))
	if hdr+TaskRoom > maxHeaderBytes {
		return fmt.Errorf("%w: a delayed task's headers are %d bytes; with the %d bytes ax adds when it moves the task they exceed the server's %d",
			ErrTooLarge, hdr, TaskRoom, maxHeaderBytes)
	}
	if size := len(data) + hdr; limit > 0 && size+TaskRoom > limit {
		return fmt.Errorf("%w: a delayed task's payload and headers are %d bytes; with the %d bytes ax adds when it moves the task they exceed the %d its bucket and the server take: at most %d",
			ErrTooLarge, size, TaskRoom, limit, limit-TaskRoom)
	}
	return nil
}

// Refused reports whether a publish error is the server's refusal of the
// message itself, which a retry cannot change: a message over the
// connection's max_payload, or a JetStream error with code 400 (bad
// request: a message or header too large for the stream, a header the
// stream refuses). An outage (no stream, a timeout, storage or cluster
// errors) is not.
func Refused(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) || errors.As(err, &apiErr) && apiErr.Code == 400
}
