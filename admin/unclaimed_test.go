package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
)

// A task submitted without an id or a key of its own gets its record from
// the worker that claims it (docs/decisions/record-at-claim.md), and is
// still known as soon as Submit returns: task.get and task.trail find it
// in its bucket, and task.cancel and task.pause act on it without
// "unseen". A task with its own id keeps the record written at submit and
// is still reported a duplicate when submitted again. Red when the admin
// reads only records (404) or the client still writes the record.
func TestUnclaimedTaskIsKnownAtOnce(t *testing.T) {
	t.Parallel()
	b := setupAdminFast(t)
	ctx := context.Background()
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme", Priority: ax.P3, MaxAttempts: 7})
	require.NoError(t, err)
	_, _, err = b.Store.Get(ctx, kv.Ref{Tenant: "acme", ID: info.ID})
	require.ErrorIs(t, err, kv.ErrNotFound, "no record before a worker claims the task")

	var got admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskGet, admin.TaskRequest{ID: info.ID}, &got))
	require.True(t, got.Unclaimed)
	require.Equal(t, kv.StateReady, got.Task.State)
	require.Equal(t, "email", got.Task.Type)
	require.Equal(t, "acme", got.Task.Tenant)
	require.Equal(t, 3, got.Task.Priority)
	require.Equal(t, 7, got.Task.MaxAttempts)
	require.Equal(t, info.Sequence, got.Task.StreamSeq)
	var trail admin.TrailReply
	require.NoError(t, b.call(t, admin.VerbTaskTrail, admin.TaskRequest{ID: info.ID}, &trail))
	require.Len(t, trail.Trail, 1)
	require.Equal(t, "publish", trail.Trail[0].Action)
	requireCode(t, b.call(t, admin.VerbTaskGet, admin.TaskRequest{ID: info.ID, Tenant: "globex"}, &got), admin.CodeNotFound, "unknown task")

	// Cancelled before any worker saw it, without "unseen": it never runs.
	cancelled := b.Submit(t, ax.TaskSpec{Type: "email"})
	reply, err := kvCancel(b, t, cancelled)
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, reply.Task.State)
	require.True(t, reply.Task.FinishedAt != nil || reply.Created)
	paused := b.Submit(t, ax.TaskSpec{Type: "email"})
	var held admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskPause, admin.TaskRequest{ID: paused}, &held))
	require.Equal(t, kv.StatePaused, held.Task.State)

	// An id of the submitter's own: the record is written at submit.
	own, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "order-42", Type: "email"})
	require.NoError(t, err)
	rec := b.Get(t, own.ID)
	require.Equal(t, "submit", rec.Trail[0].Action)
	again, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "order-42", Type: "email"})
	require.NoError(t, err)
	require.True(t, again.Duplicate)

	ran := make(chan string, 8)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("email", func(_ context.Context, task *worker.Task) error {
		ran <- task.ID
		return nil
	}, nil))
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	defer axtest.Stop(t, w)
	done := b.WaitState(t, info.ID, kv.StateSucceeded)
	var actions []string
	for _, m := range done.Trail {
		actions = append(actions, m.Action)
	}
	require.Equal(t, []string{"publish", "claim", "complete"}, actions)
	require.True(t, done.Trail[0].At.Before(done.Trail[1].At) || done.Trail[0].At.Equal(done.Trail[1].At))
	b.WaitState(t, own.ID, kv.StateSucceeded)
	time.Sleep(300 * time.Millisecond) // time for a wrongly released task to run
	close(ran)
	var runs []string
	for id := range ran {
		runs = append(runs, id)
	}
	require.ElementsMatch(t, []string{info.ID, own.ID}, runs, "the cancelled and the paused task never ran")
}

// tasks.list lists a task waiting without a record READY, as task.get
// shows it, and not under a filter of other states.
func TestTasksListShowsUnclaimedTasks(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	id := b.Submit(t, ax.TaskSpec{Type: "email"})
	list, err := b.api.List(ctx, admin.TasksListRequest{})
	require.NoError(t, err)
	require.Equal(t, 1, list.Matched)
	require.Equal(t, id, list.Tasks[0].ID)
	require.Equal(t, kv.StateReady, list.Tasks[0].State)
	list, err = b.api.List(ctx, admin.TasksListRequest{Filter: admin.Filter{States: []kv.State{kv.StateRunning}}})
	require.NoError(t, err)
	require.Zero(t, list.Matched)
}

// A task read while a worker claims it is found either way: the claim
// writes its record and then takes the message out of its bucket, so a
// read that missed the record and then the bucket reads the record again.
// Each round claims one task as a worker does (its READY record created,
// then its message acked away) while task.get and task.trail read it.
// Red when the record is read only once (the task reported unknown).
func TestUnclaimedTaskReadWhileClaimed(t *testing.T) {
	t.Parallel()
	b := setupAdminFast(t)
	ctx := context.Background()
	for range 150 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email"})
		require.NoError(t, err)
		ref := kv.Ref{Tenant: info.Tenant, ID: info.ID}
		waiting, err := b.Store.Unclaimed(ctx, info.ID, info.Tenant)
		require.NoError(t, err)
		require.Len(t, waiting, 1)
		claimed := make(chan error, 1)
		go func() {
			rec := waiting[0]
			rec.Trail, rec.UpdatedAt = nil, time.Time{}
			if _, _, err := b.Store.Create(ctx, rec, kv.Actor{Action: "claim"}); err != nil {
				claimed <- err
				return
			}
			stream, err := b.JS.Stream(ctx, rec.Stream)
			if err == nil {
				err = stream.DeleteMsg(ctx, rec.StreamSeq)
			}
			claimed <- err
		}()
		for range 4 {
			_, _, _, err := b.Store.Read(ctx, ref)
			require.NoError(t, err, "task %s read while it was claimed", info.ID)
			var got admin.TaskReply
			require.NoError(t, b.call(t, admin.VerbTaskGet, admin.TaskRequest{ID: info.ID}, &got))
		}
		require.NoError(t, <-claimed)
	}
}

// An operator's move on a task waiting without a record, named by its id
// alone, looks in the priority buckets once: the resolve finds it there
// and its READY record is written from what it found, with no second
// lookup. Counted as the direct gets on the buckets' API subjects: one per
// bucket, and one past the message found. Red with the lookup repeated
// (12 gets).
func TestUnclaimedTaskMoveLooksInBucketsOnce(t *testing.T) {
	t.Parallel()
	b := setupAdminFast(t)
	gets, err := b.NC.SubscribeSync("$JS.API.DIRECT.GET.*") // a bucket's, not a record's (its key follows)
	require.NoError(t, err)
	require.NoError(t, b.NC.Flush())
	// bucketGets counts the direct gets on the buckets seen since its last call.
	bucketGets := func() int {
		require.NoError(t, b.NC.Flush()) // the copies of the admin's gets arrive before the PONG
		n := 0
		for {
			msg, err := gets.NextMsg(0)
			if errors.Is(err, nats.ErrTimeout) {
				return n
			}
			require.NoError(t, err)
			if strings.HasPrefix(msg.Subject, "$JS.API.DIRECT.GET.AX_P") {
				n++
			}
		}
	}
	oneLookup := streams.Priorities + 1
	for _, tc := range []struct {
		name, verb string
		req        func(id string) any
		copies     int // gets of the message the move copies to another bucket
	}{
		{"cancel", admin.VerbTaskCancel, func(id string) any { return admin.TaskRequest{ID: id} }, 0},
		{"pause", admin.VerbTaskPause, func(id string) any { return admin.TaskRequest{ID: id} }, 0},
		{"resume", admin.VerbTaskResume, func(id string) any { return admin.TaskRequest{ID: id} }, 0},
		{"reprioritize", admin.VerbTaskReprioritize, func(id string) any { return admin.ReprioritizeRequest{ID: id, Priority: 0} }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := b.Submit(t, ax.TaskSpec{Type: "email"})
			bucketGets()
			var reply admin.TaskReply
			err = b.call(t, tc.verb, tc.req(id), &reply)
			if tc.verb == admin.VerbTaskResume {
				requireCode(t, err, admin.CodeConflict, "READY") // written READY, then refused: not PAUSED
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, oneLookup+tc.copies, bucketGets(), "direct gets on the buckets")
			rec := b.Get(t, id)
			require.Equal(t, "publish", rec.Trail[0].Action, "its READY record, written as its claim would")
		})
	}
}
