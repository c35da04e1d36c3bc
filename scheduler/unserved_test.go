package scheduler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// unservedBundle is a pools deployment with a leader and the management
// API, and an "x" worker; "report" has no worker until a test starts one.
type unservedBundle struct {
	*loopsBundle
	api *admin.Client
}

func setupUnserved(t *testing.T) *unservedBundle {
	t.Helper()
	return setupUnservedWith(t, 1, scheduler.Config{})
}

// setupUnservedWith is setupUnserved with n contenders and cfg (its
// UnservedInterval defaults to 50ms).
func setupUnservedWith(t *testing.T, n int, cfg scheduler.Config) *unservedBundle {
	t.Helper()
	cfg.UnservedInterval = cmpOr(cfg.UnservedInterval, 50*time.Millisecond)
	cfg.Logger = zaptest.NewLogger(t)
	lb := setupLoops(t, n, &streams.Config{Layout: streams.LayoutPools, Types: []string{"x", "report"}}, cfg)
	b := &unservedBundle{loopsBundle: lb, api: lb.StartAdmin(t, nil)}
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "x", func(context.Context, *worker.Task) error { return nil }), Concurrency: 1})
	return b
}

// record returns the task's record (a zero one when it has none).
func (b *unservedBundle) record(t *testing.T, id string) *kv.Record {
	t.Helper()
	refs, err := b.Client.Store().Find(context.Background(), id)
	require.NoError(t, err)
	if len(refs) == 0 {
		return &kv.Record{}
	}
	require.Len(t, refs, 1, "one task has id %s", id)
	rec, _, err := b.Client.Store().Get(context.Background(), refs[0])
	if err != nil {
		require.ErrorIs(t, err, kv.ErrNotFound)
		return &kv.Record{}
	}
	return rec
}

// setDeadline sets the unserved deadline of type typ through the
// management API.
func (b *unservedBundle) setDeadline(t *testing.T, typ string, d time.Duration) {
	t.Helper()
	_, err := b.api.SetUnservedDeadline(context.Background(), typ, d)
	require.NoError(t, err)
}

// waitStates waits until every task of ids is in one of states.
func (b *unservedBundle) waitStates(t *testing.T, ids []string, timeout time.Duration, states ...kv.State) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range ids {
			s := b.record(t, id).State
			assert.True(c, slices.Contains(states, s), "%s is %s, want one of %v", id, s, states)
		}
	}, timeout, 50*time.Millisecond)
}

// letters returns the dead letters in AX_DLQ by task id.
func letters(t *testing.T, js jetstream.JetStream) map[string]streams.Letter {
	t.Helper()
	ctx := context.Background()
	stream, err := js.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	out := map[string]streams.Letter{}
	for seq := stream.CachedInfo().State.FirstSeq; ; {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("ax.dlq.>"))
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			return out
		}
		seq = msg.Sequence + 1
		l := streams.ParseDeadLetter(msg.Subject, msg.Header)
		out[l.TaskID] = l
	}
}

// A task whose type no live worker serves waits; with a deadline set, the
// leader dead-letters it, with the reason, once the type went unserved and
// the task waited that long: submitted by the Go client (READY record) or
// published raw, with or without a Nats-Msg-Id (no record yet). A served
// type is not touched. Replayed once a worker serves the type, each runs.
func TestUnservedDeadlineDeadLetters(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	var ids, served []string
	for range 3 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
		require.NoError(t, err)
		ids = append(ids, info.ID)
		info, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "x", Key: "k"})
		require.NoError(t, err)
		served = append(served, info.ID)
	}
	raw := nats.NewMsg("ax.submit.p1.acme.report.k")
	raw.Data = []byte("raw")
	raw.Header.Set(jetstream.MsgIDHeader, "raw-report-1")
	_, err := b.JS.PublishMsg(ctx, raw)
	require.NoError(t, err)
	ids = append(ids, "raw-report-1")
	ack, err := b.JS.Publish(ctx, "ax.submit.p3.acme.report.k", []byte("no id"))
	require.NoError(t, err)
	stored := natstest.GetMsg(t, b.JS, "AX_P3", ack.Sequence)
	ids = append(ids, streams.FallbackID("AX_P3", ack.Sequence, stored.Time))

	stats, err := b.api.Stats(ctx, admin.StatsRequest{})
	require.NoError(t, err)
	require.Len(t, stats.Unserved, 1)
	require.Equal(t, kv.Duration(0), stats.Unserved[0].Deadline, "no deadline yet")

	table, err := b.api.SetUnservedDeadline(ctx, "report", time.Second)
	require.NoError(t, err)
	require.Equal(t, map[string]kv.Duration{"report": kv.Duration(time.Second)}, table.Deadlines)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range ids {
			rec := b.record(t, id)
			if assert.Equal(c, kv.StateDead, rec.State, id) {
				assert.Contains(c, rec.LastError, `unserved: no live worker served task type "report"`)
				assert.NotZero(c, rec.DLQSeq)
			}
		}
	}, 20*time.Second, 50*time.Millisecond)
	dead := letters(t, b.JS)
	require.Len(t, dead, len(ids))
	for _, id := range ids {
		require.Contains(t, dead[id].Error, "unserved", id)
		require.Equal(t, "report", dead[id].Type)
	}
	for _, id := range served {
		require.Equal(t, kv.StateSucceeded, b.record(t, id).State, "served task %s", id)
	}
	for p := range streams.Priorities {
		stream, err := b.JS.Stream(ctx, streams.Names{}.PriorityStream(p))
		require.NoError(t, err)
		require.Zero(t, stream.CachedInfo().State.Msgs, "P%d keeps no message of a buried task", p)
	}
	require.Equal(t, "unserved", b.record(t, ids[0]).Trail[len(b.record(t, ids[0]).Trail)-1].Action)

	// A worker for the type starts; the operator replays: each runs once.
	ran := make(chan string, 16)
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", func(_ context.Context, task *worker.Task) error {
		ran <- task.ID
		return nil
	}), Concurrency: 1})
	_, err = b.api.SetUnservedDeadline(ctx, "report", 0)
	require.NoError(t, err)
	reply, err := b.api.Replay(ctx, admin.DLQReplayRequest{Filter: admin.Filter{Type: "report"}})
	require.NoError(t, err)
	var replayed []string
	for _, ref := range reply.Replayed {
		replayed = append(replayed, ref.ID)
	}
	require.ElementsMatch(t, ids, replayed, "%+v", reply)
	var got []string
	for range ids {
		select {
		case id := <-ran:
			got = append(got, id)
		case <-time.After(20 * time.Second):
			t.Fatalf("replayed tasks ran: %v of %v", got, ids)
		}
	}
	require.ElementsMatch(t, ids, got)
}

// The deadline counts while no live worker serves the type: tasks that
// waited longer behind a busy worker of their type are not touched, and
// once that worker stops they are dead-lettered no sooner than a deadline
// later (the type's clock starts when it was last served). The task the
// stopping worker gave back is buried too.
func TestUnservedDeadlineCountsFromTheLastServedMoment(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	const deadline = 2 * time.Second
	_, err := b.api.SetUnservedDeadline(ctx, "report", deadline)
	require.NoError(t, err)
	reporter, _ := b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", func(ctx context.Context, _ *worker.Task) error {
		<-ctx.Done() // holds the only slot until the worker stops
		return ctx.Err()
	}), Concurrency: 1})
	var ids []string
	for range 3 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", MaxAttempts: 5})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	submitted := time.Now()
	require.Eventually(t, func() bool { return time.Since(submitted) > 2*deadline }, 3*deadline, 50*time.Millisecond)
	for _, id := range ids {
		require.NotEqual(t, kv.StateDead, b.record(t, id).State, "served type's task %s buried", id)
	}
	stopped := time.Now() // the worker leaves the ring first, then waits for its handler
	axtest.Stop(t, reporter)
	b.waitStates(t, ids, 30*time.Second, kv.StateDead)
	var earliest time.Time
	attempted := 0
	for _, id := range ids {
		trail := b.record(t, id).Trail
		last := trail[len(trail)-1]
		require.Equal(t, "unserved", last.Action)
		if earliest.IsZero() || last.At.Before(earliest) {
			earliest = last.At
		}
		if slices.ContainsFunc(trail, func(m kv.Move) bool { return m.Action == "worker_stopped" }) {
			attempted++
		}
	}
	// The clock starts at the last pass that saw the worker, up to a pass
	// interval (50 ms) and a pass's run before it left; a loaded machine
	// stretched that past 100 ms (CI: buried 1.89 s after the stop). Half
	// the deadline still tells it from a clock started at the submit or
	// the election, which would bury at the stop.
	require.GreaterOrEqual(t, earliest.Sub(stopped), deadline/2,
		"buried %s after the type's last worker stopped, before its deadline of %s", earliest.Sub(stopped), deadline)
	require.Equal(t, 1, attempted, "the task the stopping worker gave back is buried too")
}

// The deadline of "*" applies to every unserved type without its own,
// types a producer made up included (a flood of a typo no worker will ever
// serve leaves the bucket); a type's own deadline wins over it.
func TestUnservedDeadlineForAnyType(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	var typos []string
	for range 5 {
		ack, err := b.JS.Publish(ctx, "ax.submit.p2.acme.rpeort.k", []byte("typo"))
		require.NoError(t, err)
		typos = append(typos, streams.FallbackID("AX_P2", ack.Sequence, natstest.GetMsg(t, b.JS, "AX_P2", ack.Sequence).Time))
	}
	report, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
	require.NoError(t, err)
	_, err = b.api.SetUnservedDeadline(ctx, "report", time.Hour)
	require.NoError(t, err)
	// The typos' deadline runs from their publish: CI's loaded machine took
	// more than a second from the publishes to the first pass that saw
	// them, which buried them before the stats could show their type.
	const typoDeadline = 5 * time.Second
	table, err := b.api.SetUnservedDeadline(ctx, control.AnyUnservedType, typoDeadline)
	require.NoError(t, err)
	require.Equal(t, map[string]kv.Duration{"report": kv.Duration(time.Hour), "*": kv.Duration(typoDeadline)}, table.Deadlines)
	// The stats show a type once the leader's pass has seen its tasks (a
	// loaded machine showed "report" alone at first), until the typo's
	// deadline buries them.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stats, err := b.api.Stats(ctx, admin.StatsRequest{})
		if !assert.NoError(c, err) {
			return
		}
		deadlines := map[string]kv.Duration{}
		for _, u := range stats.Unserved {
			deadlines[u.Type] = u.Deadline
		}
		assert.Equal(c, map[string]kv.Duration{"report": kv.Duration(time.Hour), "rpeort": kv.Duration(typoDeadline)}, deadlines)
	}, typoDeadline, 20*time.Millisecond)
	b.waitStates(t, typos, 30*time.Second, kv.StateDead)
	require.Equal(t, kv.StateReady, b.record(t, report.ID).State, "report keeps its own deadline of an hour")
}
