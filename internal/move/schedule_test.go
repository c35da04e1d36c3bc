package move_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// One size bound for every schedule: max_payload less the headers' room,
// or the buckets' MaxMsgSize when smaller (the client once left out the
// room, the workers the bucket size).
func TestDelayedLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		payload int64
		msgSize int32
		want    int
	}{
		{0, 0, 0},
		{8 << 20, 0, 8<<20 - streams.HeaderRoom},
		{8 << 20, 1 << 20, 1 << 20},
		{8 << 20, 8 << 20, 8<<20 - streams.HeaderRoom},
		{0, 1 << 20, 1 << 20},
		{streams.HeaderRoom / 2, 0, 0},
	} {
		require.Equal(t, c.want, move.DelayedLimit(c.payload, c.msgSize), "max_payload %d, MaxMsgSize %d", c.payload, c.msgSize)
	}
}

// schedule is a delayed P2 task "x" of the default tenant.
func (b *testBundle) schedule(id string, runAt time.Time, payload []byte) move.Schedule {
	submit := nats.NewMsg(b.names.SubmitSubject(2, ax.DefaultTenant, "x", ""))
	submit.Data = payload
	return move.Schedule{Names: b.names, Tenant: ax.DefaultTenant, ID: id, Submit: submit, RunAt: runAt, Limit: 1 << 20}
}

func pending(id string, runAt time.Time) *kv.Record {
	rec := &kv.Record{ID: id, Type: "x", Tenant: ax.DefaultTenant, Priority: 2, State: kv.StatePending, CreatedAt: time.Now().UTC()}
	rec.Bind(1, "", 0)
	at := runAt.UTC()
	rec.RunAt = &at
	return rec
}

// A new delayed task: its record, then its schedule. An id that has a
// record the caller does not take as the task's own gets no schedule (it
// would replace the other task's); a task too large for its schedule gets
// nothing written.
func TestCreatePending(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	runAt := time.Now().Add(time.Hour)
	delayed, err := b.JS.Stream(ctx, b.names.DelayedStream())
	require.NoError(t, err)
	scheduleOf := func(id string) []byte {
		msg, err := delayed.GetLastMsgForSubject(ctx, b.names.DelayedSubject(ax.DefaultTenant, id))
		if err != nil {
			return nil
		}
		return msg.Data
	}

	created, err := move.CreatePending(ctx, b.JS, b.Store, move.Pending{Record: pending("a", runAt), Schedule: b.schedule("a", runAt, []byte("first")),
		Existing: func(*kv.Record) bool { t.Fatal("a had no record"); return false }})
	require.NoError(t, err)
	require.True(t, created.Scheduled)
	require.False(t, created.Existed)
	require.Equal(t, kv.StatePending, created.Record.State)
	require.Equal(t, []byte("first"), scheduleOf("a"))

	created, err = move.CreatePending(ctx, b.JS, b.Store, move.Pending{Record: pending("a", runAt), Schedule: b.schedule("a", runAt, []byte("second")),
		Existing: func(rec *kv.Record) bool { return false }})
	require.NoError(t, err)
	require.True(t, created.Existed)
	require.False(t, created.Scheduled)
	require.Equal(t, []byte("first"), scheduleOf("a"), "another task's schedule is not replaced")

	created, err = move.CreatePending(ctx, b.JS, b.Store, move.Pending{Record: pending("a", runAt), Schedule: b.schedule("a", runAt, []byte("first")),
		Existing: func(rec *kv.Record) bool { return rec.SamePending(pending("a", runAt)) }})
	require.NoError(t, err)
	require.True(t, created.Existed)
	require.True(t, created.Scheduled, "a retried submit writes its own schedule again")

	big := b.schedule("big", runAt, make([]byte, 1<<20))
	_, err = move.CreatePending(ctx, b.JS, b.Store, move.Pending{Record: pending("big", runAt), Schedule: big,
		Existing: func(*kv.Record) bool { return true }})
	require.ErrorIs(t, err, streams.ErrTooLarge)
	_, _, err = b.Store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "big"})
	require.ErrorIs(t, err, kv.ErrNotFound, "nothing is written for a task too large")
	require.Nil(t, scheduleOf("big"))
}

// A task that has a record steps aside: its schedule (with the aside
// mark), then its record PENDING at the run time and bound to no message.
// A compare-and-set that loses leaves the record as it was.
func TestStepAside(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	rec, rev, _ := b.submit(t, "s")
	runAt := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	s := b.schedule("s", runAt, []byte("payload-s"))
	s.Aside = "limit"
	require.NoError(t, move.StepAside(ctx, b.JS, b.Store, move.Aside{Record: rec, Revision: rev, Actor: kv.Actor{Action: "step_aside"}, Schedule: s}))
	got, _, err := b.Store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, kv.StatePending, got.State)
	require.True(t, got.RunAt.Equal(runAt))
	require.Zero(t, got.StreamSeq, "the leader's release names its copy")
	delayed, err := b.JS.Stream(ctx, b.names.DelayedStream())
	require.NoError(t, err)
	msg, err := delayed.GetLastMsgForSubject(ctx, b.names.DelayedSubject(ax.DefaultTenant, "s"))
	require.NoError(t, err)
	require.Equal(t, "limit", msg.Header.Get(streams.HeaderAside))
	require.Equal(t, "@at "+runAt.Add(-streams.DefaultScheduleEarly).UTC().Format(time.RFC3339Nano), msg.Header.Get(streams.HeaderSchedule))

	err = move.StepAside(ctx, b.JS, b.Store, move.Aside{Record: rec, Revision: rev, Actor: kv.Actor{Action: "step_aside"}, Schedule: s})
	require.ErrorIs(t, err, kv.ErrConflict, "a stale revision moves nothing")
}
