package streams_test

import (
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestDeadLetterRoundTrip(t *testing.T) {
	t.Parallel()
	names := streams.Names{}
	from := nats.Header{}
	from.Set("Ax-Trace", "abc")
	from.Set(streams.HeaderMsgID, "original-id")
	from.Set("Nats-Expected-Stream", "AX_P1")
	l := streams.Letter{TaskID: "t-1", Tenant: "acme", Type: "email", Subject: names.SubmitSubject(1, "acme", "email", "k"),
		Error: "boom", Attempts: 3, FailedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	msg := names.DeadLetterMsg(l, []byte("payload"), from, "t-1:1:3:x")
	require.Equal(t, "ax.dlq.acme.email", msg.Subject)
	require.Equal(t, []byte("payload"), msg.Data)
	require.Equal(t, "abc", msg.Header.Get("Ax-Trace"), "the task's own headers are kept")
	require.Equal(t, "t-1:1:3:x", msg.Header.Get(streams.HeaderMsgID), "the letter's own id, not the task's")
	require.Empty(t, msg.Header.Get("Nats-Expected-Stream"), "no publish expectation of the task's is kept")
	require.Equal(t, l, streams.ParseDeadLetter(msg.Subject, msg.Header))

	require.Equal(t, streams.Letter{TaskID: "t-1"}, streams.ParseDeadLetter("ax.dlq.acme", nats.Header{streams.HeaderTaskID: {"t-1"}}),
		"a subject of another shape names no tenant or type")
}

func TestParseReplaySubject(t *testing.T) {
	t.Parallel()
	names := streams.Names{}
	for _, tc := range []struct {
		name, subject string
		priority      int
		err           string
	}{
		{"submit", "ax.submit.p3.acme.email.k", 3, ""},
		{"core", "ax.core.p3.acme.email.k", 0, "is not ax.submit"},
		{"stored", "ax.p3.7.acme.email.k", 0, "is not ax.submit"},
		{"other prefix", "bx.submit.p3.acme.email.k", 0, "is not ax.submit"},
		{"bad priority", "ax.submit.p7.acme.email.k", 0, "want p0..p4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := names.ParseReplaySubject(tc.subject)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.priority, p)
		})
	}
}

func TestSalvageStored(t *testing.T) {
	t.Parallel()
	require.Equal(t, streams.Stored{Priority: 2, Tenant: "acme", Type: "_invalid", Key: "k"},
		streams.SalvageStored("ax.p2.99.acme.*.k", 2))
	require.Equal(t, streams.Stored{Priority: 1, Tenant: "_invalid", Type: "_invalid", Key: "_invalid"},
		streams.SalvageStored("ax.p1.acme", 1))
}
