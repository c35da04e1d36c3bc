package streams_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestProvisionIsIdempotent(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()

	first, err := streams.Provision(ctx, js, &streams.Config{Capacity: 1000})
	require.NoError(t, err)
	require.Len(t, first.Created, streams.Priorities+4+streams.Priorities*streams.Shards)
	require.Empty(t, first.Updated)

	second, err := streams.Provision(ctx, js, &streams.Config{Capacity: 1000})
	require.NoError(t, err)
	require.Empty(t, second.Created)
	require.Empty(t, second.Updated, "a second run must change nothing")
	require.Equal(t, len(first.Created), second.Unchanged)

	info, err := js.Stream(ctx, "AX_P3")
	require.NoError(t, err)
	cfg := info.CachedInfo().Config
	require.Equal(t, jetstream.WorkQueuePolicy, cfg.Retention)
	require.Equal(t, jetstream.DiscardNew, cfg.Discard)
	require.True(t, cfg.AllowDirect)
	require.EqualValues(t, 1000, cfg.MaxMsgs)
	for _, name := range []string{"AX_DLQ", "AX_TRAIL"} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.True(t, s.CachedInfo().Config.AllowDirect, name)
	}
	cons, err := js.Consumer(ctx, "AX_P3", "p3-s07")
	require.NoError(t, err)
	require.Equal(t, "ax.p3.7.>", cons.CachedInfo().Config.FilterSubject)
}

func TestProvisionUpdatesWhatItCan(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := streams.Provision(ctx, js, &streams.Config{Capacity: 1000})
	require.NoError(t, err)

	report, err := streams.Provision(ctx, js, &streams.Config{Capacity: 5000, AckWait: time.Minute})
	require.NoError(t, err)
	require.Len(t, report.Updated, streams.Priorities+streams.Priorities*streams.Shards)
	require.Contains(t, report.Updated[0], "MaxMsgs")
	s, err := js.Stream(ctx, "AX_P0")
	require.NoError(t, err)
	require.EqualValues(t, 5000, s.CachedInfo().Config.MaxMsgs)
	c, err := js.Consumer(ctx, "AX_P0", "p0-s00")
	require.NoError(t, err)
	require.Equal(t, time.Minute, c.CachedInfo().Config.AckWait)
}

func TestProvisionRefusesLayoutChange(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	// An existing P1 stream sharded 16 ways, as a different deployment made it.
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "AX_P1", Subjects: []string{"ax.submit.p1.*.*.*"}, Retention: jetstream.WorkQueuePolicy,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "ax.submit.p1.*.*.*", Destination: "ax.p1.{{partition(16,3)}}.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}"},
	})
	require.NoError(t, err)
	_, err = streams.Provision(ctx, js, nil)
	require.ErrorIs(t, err, streams.ErrLayoutChange)
	require.Contains(t, err.Error(), "partition(16,3)")

	// The stream is untouched.
	s, err := js.Stream(ctx, "AX_P1")
	require.NoError(t, err)
	require.Contains(t, s.CachedInfo().Config.SubjectTransform.Destination, "partition(16,3)")
}

func TestProvisionRefusesImmutableChange(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AX_DLQ", Subjects: []string{"ax.dlq.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	_, err = streams.Provision(ctx, js, nil)
	require.ErrorIs(t, err, streams.ErrImmutable)
	require.Contains(t, err.Error(), "storage")
}

// The shard the server stores a task under is the shard [streams.Shard] predicts.
func TestShardMatchesServer(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	names := streams.DefaultNames()

	const n = 1000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%x-%d", rand.Uint64(), i)
		subject := names.SubmitSubject(2, "acme", "noop", keys[i])
		if i%2 == 1 { // a core submit is stored exactly as a submit
			subject = names.CoreSubject(2, "acme", "noop", keys[i])
		}
		_, err := js.Publish(ctx, subject, nil)
		require.NoError(t, err)
	}
	stream, err := js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	for i, key := range keys {
		msg, err := stream.GetMsg(ctx, uint64(i+1))
		require.NoError(t, err)
		stored, err := names.ParseStored(msg.Subject)
		require.NoError(t, err)
		require.Equal(t, key, stored.Key)
		require.Equal(t, "acme", stored.Tenant)
		require.Equal(t, "noop", stored.Type)
		require.Equal(t, streams.Shard(key), stored.Shard, "key %q", key)
	}
}

func TestFullBucketRefuses(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := streams.Provision(ctx, js, &streams.Config{Capacity: 3})
	require.NoError(t, err)
	for i := range 3 {
		_, err := js.Publish(ctx, fmt.Sprintf("ax.submit.p0.t.x.k%d", i), nil)
		require.NoError(t, err)
	}
	_, err = js.Publish(ctx, "ax.submit.p0.t.x.k9", nil)
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.EqualValues(t, 10077, apiErr.ErrorCode)
}

func TestValidateToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"plain", "acme", true},
		{"dash", "a-b_c", true},
		{"unicode", "zürich", true},
		{"empty", "", false},
		{"dot", "a.b", false},
		{"star", "a*", false},
		{"gt", ">", false},
		{"space", "a b", false},
		{"tab", "a\tb", false},
		{"control", "a\x00b", false},
		{"long", strings.Repeat("x", 300), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := streams.ValidateToken("tenant", tc.value)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, streams.ErrInvalidToken)
				require.Contains(t, err.Error(), "tenant")
			}
		})
	}
}

func TestParseHeaders(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	h := nats.Header{}
	streams.Options{ID: "t1", Timeout: 1500 * time.Millisecond, MaxAttempts: 3, Deadline: deadline, Gen: 4}.SetHeaders(h)
	o, err := streams.ParseHeaders(h)
	require.NoError(t, err)
	require.Equal(t, streams.Options{ID: "t1", Timeout: 1500 * time.Millisecond, MaxAttempts: 3, Deadline: deadline}, o,
		"Ax-Gen is a control-plane header")
	h.Set(streams.HeaderTaskID, "t1")
	o, err = streams.ParseCopyHeaders(h)
	require.NoError(t, err)
	require.Equal(t, streams.Options{ID: "t1", Timeout: 1500 * time.Millisecond, MaxAttempts: 3, Deadline: deadline, Gen: 4}, o)

	// Ax-Core grants nothing (a core task is one published on the core
	// subject), so a message that still carries it parses as without it.
	h.Set(streams.HeaderCore, "yes please")
	again, err := streams.ParseCopyHeaders(h)
	require.NoError(t, err)
	require.Equal(t, o, again)

	for _, tc := range []struct{ header, value string }{
		{streams.HeaderTimeout, "soon"},
		{streams.HeaderTimeout, "-1s"},
		{streams.HeaderMaxAttempts, "0"},
		{streams.HeaderMaxAttempts, "many"},
		{streams.HeaderDeadline, "tomorrow"},
		{streams.HeaderRunAt, "2026-13-01T00:00:00Z"},
		{streams.HeaderGen, "-3"},
		{streams.HeaderGen, "18446744073709551615"}, // MaxUint64: the next copy would wrap to 0
		{streams.HeaderGen, "9007199254740993"},     // MaxGen+1
		{streams.HeaderMsgID, "has.dot"},
	} {
		t.Run(tc.header+"="+tc.value, func(t *testing.T) {
			parse := streams.ParseHeaders
			h := nats.Header{tc.header: []string{tc.value}}
			if tc.header == streams.HeaderGen {
				parse = streams.ParseCopyHeaders
				h.Set(streams.HeaderTaskID, "t1")
			}
			_, err := parse(h)
			require.ErrorIs(t, err, streams.ErrBadHeader)
			require.Contains(t, err.Error(), tc.header)
		})
	}
}

func TestParseStored(t *testing.T) {
	t.Parallel()
	names := streams.DefaultNames()
	s, err := names.ParseStored("ax.p4.31.acme.email.k-1")
	require.NoError(t, err)
	require.Equal(t, streams.Stored{Priority: 4, Shard: 31, Tenant: "acme", Type: "email", Key: "k-1"}, s)
	for _, bad := range []string{"ax.p5.1.a.b.c", "ax.p1.32.a.b.c", "ax.p1.01x.a.b.c", "ax.p1.01.a.b.c", "ax.p1.+1.a.b.c", "ax.p1.-0.a.b.c", "bx.p1.1.a.b.c", "ax.p1.1.a.b", "ax.px.1.a.b.c"} {
		_, err := names.ParseStored(bad)
		require.ErrorIs(t, err, streams.ErrBadSubject, bad)
	}
}
