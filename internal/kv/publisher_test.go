package kv_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// publisherBundle is a server with a stream PUB on pub.>.
type publisherBundle struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func setupPublisher(t *testing.T) *publisherBundle {
	t.Helper()
	nc, js := natstest.RunServer(t)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "PUB", Subjects: []string{"pub.>"}})
	require.NoError(t, err)
	return &publisherBundle{nc: nc, js: js}
}

// pubMsg is a publish to subject with a Nats-Msg-Id (none if id is "").
func pubMsg(subject, id string) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = []byte("x")
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	return msg
}

// One call reads each publish's own outcome, as nats.go's publish reads it:
// stored (stream and sequence), de-duplicated (the duplicate flag and the
// first message's sequence), refused (a lost compare-and-set), and no
// stream for the subject.
func TestPublisherReadsEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setupPublisher(t)
	pub, err := kv.NewPublisher(b.nc, &kv.PublisherConfig{MaxPending: 8})
	require.NoError(t, err)
	const n = 100
	var msgs []*nats.Msg
	for i := range n {
		msgs = append(msgs, pubMsg(fmt.Sprintf("pub.%d", i), fmt.Sprintf("id-%d", i)))
	}
	for i := range 10 { // the first ten again: de-duplicated
		msgs = append(msgs, pubMsg(fmt.Sprintf("pub.%d", i), fmt.Sprintf("id-%d", i)))
	}
	refused := pubMsg("pub.0", "")
	refused.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999")
	msgs = append(msgs, refused, pubMsg("nostream.x", ""))

	out := pub.PublishAll(context.Background(), msgs)
	require.Len(t, out, len(msgs))
	seqs := map[uint64]bool{}
	for i := range n {
		require.NoError(t, out[i].Err, i)
		require.Equal(t, "PUB", out[i].Ack.Stream)
		require.False(t, out[i].Ack.Duplicate, i)
		require.False(t, seqs[out[i].Ack.Sequence])
		seqs[out[i].Ack.Sequence] = true
		got, err := b.js.Stream(context.Background(), "PUB")
		require.NoError(t, err)
		stored, err := got.GetMsg(context.Background(), out[i].Ack.Sequence)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("pub.%d", i), stored.Subject, "the sequence is the message's own")
	}
	for i := range 10 {
		dup := out[n+i]
		require.NoError(t, dup.Err)
		require.True(t, dup.Ack.Duplicate, i)
		require.Equal(t, out[i].Ack.Sequence, dup.Ack.Sequence, "a duplicate's ack names the first message")
	}
	require.True(t, kv.IsRevisionMismatch(out[n+10].Err), "%v", out[n+10].Err)
	require.ErrorIs(t, out[n+11].Err, jetstream.ErrNoStreamResponse)
	require.EqualValues(t, n, natstest.StreamMsgs(t, b.js, "PUB"))
}

// silent subscribes to "silent.>" for the test, calling got for each
// publish and never replying: its publishes time out.
func silent(t *testing.T, b *publisherBundle, got func()) {
	t.Helper()
	sub, err := b.nc.Subscribe("silent.>", func(*nats.Msg) { got() })
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())
}

// A call of one publish (a request on the connection's shared reply
// subscription) reads the same outcomes as a batch: stored, de-duplicated,
// refused, no stream, unanswered, and the context's end.
func TestPublisherReadsALonePublish(t *testing.T) {
	t.Parallel()
	b := setupPublisher(t)
	silent(t, b, func() {})
	pub, err := kv.NewPublisher(b.nc, &kv.PublisherConfig{MaxPending: 1, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	one := func(ctx context.Context, msg *nats.Msg) kv.Published {
		out := pub.PublishAll(ctx, []*nats.Msg{msg})
		require.Len(t, out, 1)
		return out[0]
	}
	first := one(context.Background(), pubMsg("pub.1", "lone-1"))
	require.NoError(t, first.Err)
	require.Equal(t, "PUB", first.Ack.Stream)
	require.False(t, first.Ack.Duplicate)
	dup := one(context.Background(), pubMsg("pub.1", "lone-1"))
	require.NoError(t, dup.Err)
	require.True(t, dup.Ack.Duplicate)
	require.Equal(t, first.Ack.Sequence, dup.Ack.Sequence)
	refused := pubMsg("pub.1", "")
	refused.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999")
	require.True(t, kv.IsRevisionMismatch(one(context.Background(), refused).Err))
	require.ErrorIs(t, one(context.Background(), pubMsg("nostream.x", "")).Err, jetstream.ErrNoStreamResponse)
	require.ErrorIs(t, one(context.Background(), pubMsg("silent.1", "")).Err, jetstream.ErrAsyncPublishTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, one(ctx, pubMsg("silent.2", "")).Err, context.DeadlineExceeded)
	require.NoError(t, one(context.Background(), pubMsg("pub.2", "")).Err, "the window given back each time")
}

// At most MaxPending publishes are in flight: a subscriber that never
// replies sees that many, and each times out in turn.
func TestPublisherWindowAndTimeout(t *testing.T) {
	t.Parallel()
	b := setupPublisher(t)
	var seen atomic.Int64
	silent(t, b, func() { seen.Add(1) })
	pub, err := kv.NewPublisher(b.nc, &kv.PublisherConfig{MaxPending: 5, Timeout: 400 * time.Millisecond})
	require.NoError(t, err)
	msgs := make([]*nats.Msg, 15)
	for i := range msgs {
		msgs[i] = pubMsg(fmt.Sprintf("silent.%d", i), "")
	}
	done := make(chan []kv.Published)
	go func() { done <- pub.PublishAll(context.Background(), msgs) }()
	require.Eventually(t, func() bool { return seen.Load() == 5 }, 2*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // nothing more goes out until one times out
	require.EqualValues(t, 5, seen.Load())
	out := <-done
	require.EqualValues(t, 15, seen.Load())
	for _, res := range out {
		require.ErrorIs(t, res.Err, jetstream.ErrAsyncPublishTimeout)
	}

	// The window is free again: a stored publish goes through.
	out = pub.PublishAll(context.Background(), []*nats.Msg{pubMsg("pub.after", "")})
	require.NoError(t, out[0].Err)
}

// A call that ends with its context returns at once, its unanswered
// publishes failed with the context's error, and gives its window back.
func TestPublisherHonoursContext(t *testing.T) {
	t.Parallel()
	b := setupPublisher(t)
	silent(t, b, func() {})
	pub, err := kv.NewPublisher(b.nc, &kv.PublisherConfig{MaxPending: 4})
	require.NoError(t, err)
	msgs := make([]*nats.Msg, 10)
	for i := range msgs {
		msgs[i] = pubMsg(fmt.Sprintf("silent.%d", i), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	out := pub.PublishAll(ctx, msgs)
	require.Less(t, time.Since(start), 5*time.Second)
	for _, res := range out {
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
	}
	out = pub.PublishAll(context.Background(), []*nats.Msg{pubMsg("pub.after", "")})
	require.NoError(t, out[0].Err)
}

// Concurrent calls share one window and each gets its own outcomes.
func TestPublisherConcurrentCalls(t *testing.T) {
	t.Parallel()
	b := setupPublisher(t)
	pub, err := kv.NewPublisher(b.nc, &kv.PublisherConfig{MaxPending: 16})
	require.NoError(t, err)
	const callers, each = 4, 300
	outs := make([][]kv.Published, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			msgs := make([]*nats.Msg, each)
			for i := range msgs {
				msgs[i] = pubMsg(fmt.Sprintf("pub.%d.%d", c, i), fmt.Sprintf("c%d-%d", c, i))
			}
			outs[c] = pub.PublishAll(context.Background(), msgs)
		})
	}
	wg.Wait()
	seqs := map[uint64]bool{}
	for _, out := range outs {
		for _, res := range out {
			require.NoError(t, res.Err)
			require.False(t, res.Ack.Duplicate)
			require.False(t, seqs[res.Ack.Sequence])
			seqs[res.Ack.Sequence] = true
		}
	}
	require.EqualValues(t, callers*each, natstest.StreamMsgs(t, b.js, "PUB"))
}
