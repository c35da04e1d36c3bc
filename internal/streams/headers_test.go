package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// serverHeaders are the headers nats-server v2.15.2 acts on or adds
// (server/stream.go, scheduler.go, msgtrace.go, accounts.go).
var serverHeaders = []string{
	"Nats-Msg-Id", "Nats-Expected-Stream", "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Subject-Sequence",
	"Nats-Expected-Last-Subject-Sequence-Subject", "Nats-Expected-Last-Msg-Id", "Nats-Stream-Source", "Nats-Last-Consumer",
	"Nats-Last-Stream", "Nats-Consumer-Stalled", "Nats-Rollup", "Nats-Msg-Size", "Nats-Response-Type", "Nats-TTL",
	"Nats-Marker-Reason", "Nats-Incr", "Nats-Counter-Sources", "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit",
	"Nats-Schedule", "Nats-Schedule-Time-Zone", "Nats-Schedule-TTL", "Nats-Schedule-Rollup", "Nats-Schedule-Target",
	"Nats-Schedule-Source", "Nats-Scheduler", "Nats-Schedule-Next", "Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp",
	"Nats-Subject", "Nats-Last-Sequence", "Nats-Num-Pending", "Nats-UpTo-Sequence", "Nats-Trace-Dest", "Nats-Trace-Hop",
	"Nats-Trace-Origin-Account", "Nats-Trace-Only", "Nats-Request-Info", "Nats-Required-Api-Level", "traceparent",
}

// producerHeaders is a producer's message with every header the server
// acts on, other spellings of them and of ax's, ax's internal headers, the
// contract's options and handler headers, and a value with a line break.
func producerHeaders() nats.Header {
	h := nats.Header{}
	for _, name := range serverHeaders {
		h[name] = []string{"evil"}
		h[strings.ToLower(name)] = []string{"evil"}
		h[strings.ToUpper(name)] = []string{"evil"}
	}
	for _, name := range streams.InternalHeaders() {
		h[name] = []string{"evil"}
	}
	h[streams.HeaderTimeout] = []string{"30s"}
	h[streams.HeaderMaxAttempts] = []string{"3"}
	h[streams.HeaderCore] = []string{"true"}
	h[streams.HeaderDeadline] = []string{"2030-01-01T00:00:00Z"}
	h[streams.HeaderRunAt] = []string{"2029-01-01T00:00:00Z"}
	h["Ax-Trace"] = []string{"t-1", "t-2"}
	h["Ax-Broken"] = []string{"a\r\nNats-Schedule-Source: ax.delayed.victim"}
	h["AX-Shout"] = []string{"x"}
	h["ax-lower"] = []string{"x"}
	h["Ax-"] = []string{"x"}
	h["Ax-Two Words"] = []string{"x"}
	h["X-Other"] = []string{"x"}
	return h
}

// kept is what ax carries of producerHeaders.
var kept = nats.Header{
	streams.HeaderTimeout: {"30s"}, streams.HeaderMaxAttempts: {"3"}, streams.HeaderCore: {"true"},
	streams.HeaderDeadline: {"2030-01-01T00:00:00Z"}, streams.HeaderRunAt: {"2029-01-01T00:00:00Z"}, "Ax-Trace": {"t-1", "t-2"},
}

func TestKeptHeaders(t *testing.T) {
	t.Parallel()
	require.Equal(t, kept, streams.KeptHeaders(producerHeaders()))
	require.Empty(t, streams.KeptHeaders(nil))
}

// Every write ax makes of a producer's message (a schedule, a
// control-plane copy, a dead letter) carries the kept headers and the
// writer's own, nothing else of the producer's.
func TestAxWritesCarryOnlyKeptHeaders(t *testing.T) {
	t.Parallel()
	names := streams.Names{}
	submit := nats.NewMsg(names.SubmitSubject(2, "acme", "echo", "k"))
	submit.Header = producerHeaders()
	submit.Data = []byte("payload")
	fire := time.Date(2028, 12, 31, 23, 59, 59, 0, time.UTC)
	letter := streams.Letter{TaskID: "t-1", Tenant: "acme", Type: "echo", Subject: submit.Subject, Error: "boom", Attempts: 1, FailedAt: fire}
	for _, c := range []struct {
		name string
		msg  *nats.Msg
		own  nats.Header
	}{
		{"schedule", names.DelayedMsg("acme", "t-1", submit, fire), nats.Header{
			streams.HeaderTaskID: {"t-1"}, streams.HeaderSubject: {submit.Subject},
			streams.HeaderSchedule: {"@at 2028-12-31T23:59:59Z"}, streams.HeaderScheduleTarget: {"ax.due.acme.t-1"}}},
		{"copy", streams.TaskCopy(names.CopySubject(2, "acme", "echo", "k"), submit.Data, submit.Header, "t-1", 2, "n"), nats.Header{
			streams.HeaderTaskID: {"t-1"}, streams.HeaderGen: {"2"}, streams.HeaderMsgID: {"t-1:g2:n"}}},
		{"dead letter", names.DeadLetterMsg(letter, submit.Data, submit.Header, "l-1"), nats.Header{
			streams.HeaderTaskID: {"t-1"}, streams.HeaderSubject: {submit.Subject}, streams.HeaderError: {"boom"},
			streams.HeaderAttempts: {"1"}, streams.HeaderFailedAt: {"2028-12-31T23:59:59Z"}, streams.HeaderMsgID: {"l-1"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := nats.Header{}
			for k, v := range kept {
				want[k] = v
			}
			for k, v := range c.own {
				want[k] = v
			}
			require.Equal(t, want, c.msg.Header)
			require.Equal(t, "payload", string(c.msg.Data))
		})
	}
}

func TestCheckDelayedSize(t *testing.T) {
	t.Parallel()
	h := nats.Header{streams.HeaderRunAt: {"2029-01-01T00:00:00Z"}, "Nats-Msg-Id": {strings.Repeat("i", 200)}}
	hdr := streams.HeaderBytes(streams.KeptHeaders(h))
	const limit = 64 << 10
	fits := make([]byte, limit-streams.TaskRoom-hdr)
	require.NoError(t, streams.CheckDelayedSize(fits, h, limit), "the producer's Nats- headers do not count: ax drops them")
	err := streams.CheckDelayedSize(append(fits, 0), h, limit)
	require.ErrorIs(t, err, streams.ErrTooLarge)
	require.ErrorContains(t, err, fmt.Sprintf("at most %d", limit-streams.TaskRoom))
	require.NoError(t, streams.CheckDelayedSize(make([]byte, 10<<20), h, 0), "no limit known")

	big := nats.Header{"Ax-Big": {strings.Repeat("x", 62<<10)}}
	err = streams.CheckDelayedSize(nil, big, 0)
	require.ErrorIs(t, err, streams.ErrTooLarge, "headers past the server's 64 KiB less TaskRoom")
	require.ErrorContains(t, err, "headers")
}

func TestRefused(t *testing.T) {
	t.Parallel()
	require.True(t, streams.Refused(nats.ErrMaxPayload))
	require.True(t, streams.Refused(fmt.Errorf("publish: %w", &jetstream.APIError{Code: 400, ErrorCode: 10054})))
	require.False(t, streams.Refused(&jetstream.APIError{Code: 503, ErrorCode: 10077}), "a full stream is an outage")
	require.False(t, streams.Refused(&jetstream.APIError{Code: 404, ErrorCode: 10059}), "a missing stream is an outage")
	require.False(t, streams.Refused(jetstream.ErrNoStreamResponse))
	require.False(t, streams.Refused(context.DeadlineExceeded))
	require.False(t, streams.Refused(nil))
	require.False(t, streams.Refused(errors.New("other")))
}

// Provision fits the buckets' MaxMsgSize to the server's max_payload, so
// that AX_DELAYED and AX_DLQ (HeaderRoom more) take whatever a bucket
// does; an explicit MaxMsgSize above that is refused.
func TestProvisionFitsMaxPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	maxMsgSizes := func(js jetstream.JetStream) map[string]int32 {
		out := map[string]int32{}
		for _, name := range []string{"AX_P0", "AX_P4", "AX_DELAYED", "AX_DLQ"} {
			s, err := js.Stream(ctx, name)
			require.NoError(t, err)
			out[name] = s.CachedInfo().Config.MaxMsgSize
		}
		return out
	}
	nc, js := natstest.RunServer(t)
	payload := int32(nc.MaxPayload())
	_, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	largest := min(streams.DefaultMaxMsgSize, payload-streams.HeaderRoom)
	require.Equal(t, map[string]int32{"AX_P0": largest, "AX_P4": largest, "AX_DELAYED": largest + streams.HeaderRoom,
		"AX_DLQ": largest + streams.HeaderRoom}, maxMsgSizes(js))

	_, err = streams.Provision(ctx, js, &streams.Config{MaxMsgSize: payload - streams.HeaderRoom + 1})
	require.ErrorContains(t, err, "max_payload")
	_, err = streams.Provision(ctx, js, &streams.Config{MaxMsgSize: -1})
	require.NoError(t, err)
	require.Equal(t, payload-streams.HeaderRoom, maxMsgSizes(js)["AX_P0"])
	_, err = streams.Provision(ctx, js, &streams.Config{MaxMsgSize: 8 << 10})
	require.NoError(t, err)
	require.Equal(t, map[string]int32{"AX_P0": 8 << 10, "AX_P4": 8 << 10, "AX_DELAYED": 8<<10 + streams.HeaderRoom,
		"AX_DLQ": 8<<10 + streams.HeaderRoom}, maxMsgSizes(js))
}

// A well-formed W3C trace context is kept (a task's trace runs through
// its copies); a malformed or repeated one, or another spelling, is not.
func TestKeptTraceContext(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := nats.Header{streams.HeaderTraceParent: {parent}, streams.HeaderTraceState: {"congo=t61rcWkgMzE"}}
	require.Equal(t, h, streams.KeptHeaders(h))
	for _, bad := range []nats.Header{
		{streams.HeaderTraceParent: {"evil"}},
		{streams.HeaderTraceParent: {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{streams.HeaderTraceParent: {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
		{streams.HeaderTraceParent: {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}},
		{streams.HeaderTraceParent: {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}},
		{streams.HeaderTraceParent: {parent + "\r\nNats-Rollup: all"}},
		{streams.HeaderTraceParent: {parent, parent}},
		{"Traceparent": {parent}},
		{streams.HeaderTraceState: {strings.Repeat("a", 513)}},
		{streams.HeaderTraceState: {"a=b\r\nNats-Rollup: all"}},
	} {
		require.Empty(t, streams.KeptHeaders(bad), "%v", bad)
	}
}
