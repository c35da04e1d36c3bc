package streams_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A bucket that refuses non-core tasks is refused by the server itself: a
// producer that ignores the pressure report cannot store a submit, while a
// core submit (a permission: another subject) and a control-plane copy
// still are. Provisioning leaves the admission as the leader set it.
func TestAdmissionIsEnforcedByTheServer(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	n := streams.DefaultNames()

	_, err = js.Publish(ctx, n.SubmitSubject(1, "t", "x", "before"), nil)
	require.NoError(t, err)

	changed, err := streams.SetAdmission(ctx, js, n, 1, true)
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = streams.SetAdmission(ctx, js, n, 1, true)
	require.NoError(t, err)
	require.False(t, changed, "a second refusal changes nothing")

	_, err = js.Publish(ctx, n.SubmitSubject(1, "t", "x", "refused"), nil)
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "the server refuses a submit")
	_, err = js.Publish(ctx, n.CoreSubject(1, "t", "x", "core"), nil)
	require.NoError(t, err, "a core submit is admitted")
	_, err = js.Publish(ctx, n.CopySubject(1, "t", "x", "copy"), nil)
	require.NoError(t, err, "a control-plane copy is admitted")
	_, err = js.Publish(ctx, n.SubmitSubject(2, "t", "x", "other"), nil)
	require.NoError(t, err, "another bucket still admits")

	report, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	require.Empty(t, report.Updated, "provisioning keeps the refusal")
	stream, err := js.Stream(ctx, n.PriorityStream(1))
	require.NoError(t, err)
	require.True(t, n.Refusing(stream.CachedInfo().Config))
	require.EqualValues(t, 3, stream.CachedInfo().State.Msgs, "stored tasks are kept")

	changed, err = streams.SetAdmission(ctx, js, n, 1, false)
	require.NoError(t, err)
	require.True(t, changed)
	_, err = js.Publish(ctx, n.SubmitSubject(1, "t", "x", "after"), nil)
	require.NoError(t, err, "admitted again")
	stream, err = js.Stream(ctx, n.PriorityStream(1))
	require.NoError(t, err)
	require.False(t, n.Refusing(stream.CachedInfo().Config))
	require.Equal(t, jetstream.WorkQueuePolicy, stream.CachedInfo().Config.Retention)
	require.EqualValues(t, 4, stream.CachedInfo().State.Msgs)
}

// A priority bucket whose shard transform reads the subject's tokens other
// than ax's (the same 32 shards, the key taken from another token) is
// refused, not updated: a stored task's subject would no longer be the one
// a submit of its key is stored under.
func TestBucketOfAnotherTransformIsRefused(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	n := streams.DefaultNames()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "AX_P0", Subjects: []string{"ax.submit.p0.*.*.*", "ax.p0.*.*.*.*.ctl"}, Retention: jetstream.WorkQueuePolicy,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "ax.submit.p0.*.*.*", Destination: "ax.p0.{{partition(32,3)}}.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}"},
	})
	require.NoError(t, err)
	stored, err := js.Publish(ctx, n.SubmitSubject(0, "acme", "mail", "k1"), nil)
	require.NoError(t, err)

	_, err = streams.Provision(ctx, js, nil)
	require.ErrorIs(t, err, streams.ErrLayoutChange)
	stream, err := js.Stream(ctx, "AX_P0")
	require.NoError(t, err)
	require.Contains(t, stream.CachedInfo().Config.SubjectTransform.Destination, "partition(32,3)", "the stream is untouched")
	_, err = stream.GetMsg(ctx, stored.Sequence)
	require.NoError(t, err, "the stored task is kept")
}

// staleWriter stands for a leader whose admission update (the whole
// stream configuration it read a moment before) lands right after one of
// Provision's updates of the same stream.
type staleWriter struct {
	jetstream.JetStream
	stale *jetstream.StreamConfig
}

func (w *staleWriter) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := w.JetStream.UpdateStream(ctx, cfg)
	if err == nil && w.stale != nil && cfg.Name == w.stale.Name {
		stale := *w.stale
		w.stale = nil
		_, err = w.JetStream.UpdateStream(ctx, stale)
	}
	return s, err
}

// The leader's admission step writes back the whole configuration it read:
// landing just after a provision's update of the bucket, it undid it (the
// capacity stayed at the old value while provision reported it updated).
// Provision checks the buckets it updated again at the end and applies what
// is missing, keeping the admission the leader set.
func TestProvisionSurvivesAConcurrentAdmission(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	n := streams.DefaultNames()
	_, err := streams.Provision(ctx, js, &streams.Config{Capacity: 20})
	require.NoError(t, err)

	stream, err := js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	stale := stream.CachedInfo().Config // the leader reads, then refuses
	stale.Subjects = []string{n.CoreFilter(2), n.CopyFilter(2)}

	report, err := streams.Provision(ctx, &staleWriter{JetStream: js, stale: &stale}, &streams.Config{Capacity: 40})
	require.NoError(t, err)
	require.NotEmpty(t, report.Updated)
	stream, err = js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	require.EqualValues(t, 40, stream.CachedInfo().Config.MaxMsgs, "the provisioned capacity holds")
	require.True(t, n.Refusing(stream.CachedInfo().Config), "and so does the leader's refusal")
}
