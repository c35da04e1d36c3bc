package move_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// TestMain fails the package's tests if a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakOptions()...)
}

// testBundle is axtest's bundle with this package's own helpers.
type testBundle struct {
	*axtest.Bundle
	names streams.Names
}

func setup(t *testing.T, cfg *streams.Config) *testBundle {
	t.Helper()
	return &testBundle{Bundle: axtest.Setup(t, axtest.Options{Streams: cfg}), names: streams.DefaultNames()}
}

// setupFast is setup for a test of the fast tier (go test -short).
func setupFast(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{Bundle: axtest.Fast(t), names: streams.DefaultNames()}
}

// mover returns a Mover with the test hooks of test.
func (b *testBundle) mover(t *testing.T, test move.TestConfig) *move.Mover {
	t.Helper()
	m, err := move.New(b.JS, b.Store, &move.Config{Test: test})
	require.NoError(t, err)
	return m
}

// submit stores a READY task of type "x" at P2 and returns its record,
// revision and message.
func (b *testBundle) submit(t *testing.T, id string) (*kv.Record, uint64, move.Message) {
	t.Helper()
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{ID: id, Type: "x", Priority: ax.P2, Payload: []byte("payload-" + id)})
	require.NoError(t, err)
	rec, rev, err := b.Store.Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: id})
	require.NoError(t, err)
	return rec, rev, move.Message{Stream: info.Stream, Seq: info.Sequence}
}

// request moves rec (read at rev) from old to P1, as aging does.
func request(rec *kv.Record, rev uint64, raw *jetstream.RawStreamMsg, old move.Message) move.Request {
	set := nats.Header{}
	set.Set(streams.HeaderWaitingSince, time.Now().UTC().Format(time.RFC3339Nano))
	return move.Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: 1, Actor: kv.Actor{Action: "aging"},
		Copy: move.Copy{Data: raw.Data, Header: raw.Header, Set: set}, Old: old}
}

// stored reports whether msg is still stored.
func (b *testBundle) stored(t *testing.T, msg move.Message) bool {
	t.Helper()
	ok, err := b.has(msg)
	require.NoError(t, err)
	return ok
}

// has reports whether msg is still stored, failing nothing (for a
// condition polled off the test goroutine).
func (b *testBundle) has(msg move.Message) (bool, error) {
	s, err := b.JS.Stream(context.Background(), msg.Stream)
	if err != nil {
		return false, err
	}
	_, err = s.GetMsg(context.Background(), msg.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Landed: the record names the copy (next generation, its bucket, the
// move's trail event) and the old message is gone.
func TestMoveLanded(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	rec, rev, old := b.submit(t, "a")
	raw := natstest.GetMsg(t, b.JS, old.Stream, old.Seq)
	guarded := 0
	req := request(rec, rev, raw, old)
	req.Guard = func(context.Context) error { guarded++; return nil }

	res, err := b.mover(t, move.TestConfig{}).Move(ctx, req)
	require.NoError(t, err)
	require.Equal(t, move.Landed, res.Outcome)
	require.Equal(t, 1, guarded)
	require.NoError(t, res.DeleteErr)
	require.Equal(t, "AX_P1", res.Copy.Stream)
	require.EqualValues(t, 2, res.Gen)

	got, gotRev, err := b.Store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, res.Revision, gotRev)
	require.Equal(t, kv.StateReady, got.State)
	require.EqualValues(t, 2, got.Gen)
	require.Equal(t, 1, got.Priority)
	require.True(t, got.Names(b.names, res.Copy.Stream, res.Copy.Seq), "the record names the copy")
	require.Equal(t, "aging", got.LastMove().Action)

	copied := natstest.GetMsg(t, b.JS, res.Copy.Stream, res.Copy.Seq)
	require.Equal(t, "payload-a", string(copied.Data))
	require.Equal(t, b.names.CopySubject(1, ax.DefaultTenant, "x", "a"), copied.Subject)
	require.Equal(t, "a", copied.Header.Get(streams.HeaderTaskID))
	require.Equal(t, "2", copied.Header.Get(streams.HeaderGen))
	require.Regexp(t, `^a:g2:.+`, copied.Header.Get(streams.HeaderMsgID), "a Nats-Msg-Id unique to the move")
	require.NotEmpty(t, copied.Header.Get(streams.HeaderWaitingSince))
	require.False(t, b.stored(t, old), "the old message is deleted")
}

// Lost for certain: another writer moved the record between the publish
// and the compare-and-set (here the guard writes, as an operator's pause
// would land there). The copy is deleted; the record and the old message
// are untouched by the move.
func TestMoveLostDeletesTheCopy(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	rec, rev, old := b.submit(t, "b")
	raw := natstest.GetMsg(t, b.JS, old.Stream, old.Seq)
	req := request(rec, rev, raw, old)
	var copies uint64
	req.Guard = func(ctx context.Context) error {
		copies = natstest.StreamMsgs(t, b.JS, "AX_P1")
		_, _, err := b.Store.Apply(ctx, rec, rev, kv.StatePaused, kv.Actor{Action: "pause"}, nil)
		return err
	}

	res, err := b.mover(t, move.TestConfig{}).Move(ctx, req)
	require.ErrorIs(t, err, kv.ErrConflict)
	require.Equal(t, move.Lost, res.Outcome)
	require.False(t, res.CopyKept)
	require.NoError(t, res.DeleteErr)
	require.EqualValues(t, 1, copies, "the copy was stored before the compare-and-set")
	require.False(t, b.stored(t, res.Copy), "a lost move deletes its copy")
	require.True(t, b.stored(t, old), "the record's message is untouched")

	got, _, err := b.Store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, kv.StatePaused, got.State, "the other writer's move stands")
	require.EqualValues(t, 1, got.Gen)
	require.True(t, got.Names(b.names, old.Stream, old.Seq))
}

// A guard that refuses (a leader whose lease lapsed) stops the move just
// before the compare-and-set: lost, the copy deleted, the record not written.
func TestMoveGuardStopsBeforeTheWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rec, rev, old := b.submit(t, "c")
	raw := natstest.GetMsg(t, b.JS, old.Stream, old.Seq)
	errNotLeading := errors.New("not leading")
	req := request(rec, rev, raw, old)
	req.Guard = func(context.Context) error { return errNotLeading }

	res, err := b.mover(t, move.TestConfig{}).Move(ctx, req)
	require.ErrorIs(t, err, errNotLeading)
	require.Equal(t, move.Lost, res.Outcome)
	require.False(t, b.stored(t, res.Copy))
	require.True(t, b.stored(t, old))
	_, gotRev, err := b.Store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, rev, gotRev, "nothing written to the record")
}

// A lost move of a PENDING task keeps its copy: a worker binds the first
// released copy of a PENDING task it meets, without the move's
// compare-and-set, so the copy may be the task's message now (here the
// guard binds it, as such a worker would).
func TestMoveLostKeepsACopyAWorkerMayHaveBound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "d", Type: "x", Priority: ax.P2, Payload: []byte("later"), RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	ref := kv.Ref{Tenant: ax.DefaultTenant, ID: info.ID}
	rec, rev, err := b.Store.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, kv.StatePending, rec.State)
	set := nats.Header{}
	set.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano))
	req := move.Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: 2, Actor: kv.Actor{Action: "due"},
		Copy: move.Copy{Data: []byte("later"), Set: set}}
	var copyOf func() move.Message
	req.Guard = func(ctx context.Context) error {
		copied := copyOf()
		_, _, err := b.Store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: "w", Action: "due"}, func(r *kv.Record) error {
			r.Bind(2, copied.Stream, copied.Seq)
			return nil
		})
		return err
	}
	copyOf = func() move.Message {
		s, err := b.JS.Stream(ctx, "AX_P2")
		require.NoError(t, err)
		msg, err := s.GetLastMsgForSubject(ctx, b.names.CopySubject(2, ax.DefaultTenant, "x", "d"))
		require.NoError(t, err)
		return move.Message{Stream: "AX_P2", Seq: msg.Sequence}
	}

	res, err := b.mover(t, move.TestConfig{}).Move(ctx, req)
	require.ErrorIs(t, err, kv.ErrConflict)
	require.Equal(t, move.Lost, res.Outcome)
	require.True(t, res.CopyKept)
	require.True(t, b.stored(t, res.Copy), "the copy the worker bound is kept")
	got, _, err := b.Store.Get(ctx, ref)
	require.NoError(t, err)
	require.True(t, got.Names(b.names, res.Copy.Stream, res.Copy.Seq))
}

// Unclear: the compare-and-set landed but its reply was lost. The copy and
// the old message are both kept; a worker resolves it by generation: the
// copy, which the record names, runs once, and the old message, a
// generation behind, is dropped.
func TestMoveUnclearKeepsTheCopy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec, rev, old := b.submit(t, "e")
	raw := natstest.GetMsg(t, b.JS, old.Stream, old.Seq)
	m := b.mover(t, move.TestConfig{LoseWriteReply: func(ref kv.Ref) bool { return ref.ID == "e" }})

	res, err := m.Move(ctx, request(rec, rev, raw, old))
	require.Error(t, err)
	require.NotErrorIs(t, err, kv.ErrConflict)
	require.Equal(t, move.Unclear, res.Outcome)
	require.True(t, b.stored(t, res.Copy), "an unclear move keeps its copy")
	require.True(t, b.stored(t, old), "and the old message")

	var runs atomic.Int32
	var ranFrom atomic.Value
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("x", func(ctx context.Context, task *worker.Task) error {
		runs.Add(1)
		ranFrom.Store(string(task.Payload))
		return nil
	}, nil))
	w, err := worker.New(ctx, b.JS, &worker.Config{Registry: reg, Concurrency: 2, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	require.Eventually(t, func() bool {
		got, _, err := b.Store.Get(ctx, rec.Ref())
		return err == nil && got.State == kv.StateSucceeded
	}, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { ok, err := b.has(old); return err == nil && !ok }, 10*time.Second, 10*time.Millisecond, "the stale message is dropped")
	cancel()
	require.NoError(t, <-done)
	require.EqualValues(t, 1, runs.Load(), "the task ran once")
	got, _, err := b.Store.Get(context.Background(), rec.Ref())
	require.NoError(t, err)
	require.True(t, got.Names(b.names, res.Copy.Stream, res.Copy.Seq), "from the copy")
	require.Equal(t, "payload-e", ranFrom.Load())
}

// A full bucket refuses the copy: nothing is written (no copy, the record
// and the old message untouched), and the error says to retry.
func TestMoveIntoAFullBucket(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Capacity: 3})
	ctx := context.Background()
	rec, rev, old := b.submit(t, "f")
	raw := natstest.GetMsg(t, b.JS, old.Stream, old.Seq)
	for i := range 3 {
		_, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "fill" + string(rune('0'+i)), Type: "x", Priority: ax.P1})
		require.NoError(t, err)
	}
	require.EqualValues(t, 3, natstest.StreamMsgs(t, b.JS, "AX_P1"))
	req := request(rec, rev, raw, old)
	req.Guard = func(context.Context) error { t.Error("the guard is not reached"); return nil }

	res, err := b.mover(t, move.TestConfig{}).Move(ctx, req)
	require.ErrorIs(t, err, move.ErrBucketFull)
	var full *move.BucketFullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, "AX_P1", full.Stream)
	require.Contains(t, err.Error(), "bucket AX_P1 is full (")
	require.Contains(t, err.Error(), "retry when it drains")
	require.Zero(t, res.Outcome)
	require.True(t, res.Copy.IsZero())
	require.EqualValues(t, 3, natstest.StreamMsgs(t, b.JS, "AX_P1"))
	require.True(t, b.stored(t, old))
	_, gotRev, err := b.Store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, rev, gotRev)

	// The same for the first release of a task without a record.
	_, err = b.mover(t, move.TestConfig{}).PublishFirst(ctx, move.FirstRequest{ID: "g",
		Task: streams.Stored{Priority: 1, Tenant: ax.DefaultTenant, Type: "x", Key: "g"}, Copy: move.Copy{Data: []byte("g")}})
	require.ErrorIs(t, err, move.ErrBucketFull)
}

// A task with no record is released at generation 1, and the superseded
// message (its fired schedule) is deleted.
func TestPublishFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ack, err := b.JS.Publish(ctx, "ax.submit.p3.acme.x.k", []byte("old"))
	require.NoError(t, err)
	old := move.Message{Stream: ack.Stream, Seq: ack.Sequence}
	res, err := b.mover(t, move.TestConfig{}).PublishFirst(ctx, move.FirstRequest{ID: "h",
		Task: streams.Stored{Priority: 2, Tenant: "acme", Type: "x", Key: "k"}, Copy: move.Copy{Data: []byte("h")}, Old: old})
	require.NoError(t, err)
	require.Equal(t, move.Landed, res.Outcome)
	require.False(t, b.stored(t, old))
	copied := natstest.GetMsg(t, b.JS, res.Copy.Stream, res.Copy.Seq)
	require.Equal(t, "1", copied.Header.Get(streams.HeaderGen))
	require.Equal(t, "h", copied.Header.Get(streams.HeaderTaskID))
	require.Equal(t, b.names.CopySubject(2, "acme", "x", "k"), copied.Subject)
}
