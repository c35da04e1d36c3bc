package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A worker reads the ack wait of the shard consumers: configured with a
// different one it refuses to start, naming both; configured with none it
// adopts the consumers' 3s, so a 5s task heartbeats in time and runs once
// (with the old 30s default it was redelivered at 3s and ran twice).
func TestWorkerAdoptsConsumersAckWait(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: 3 * time.Second})
	ctx := context.Background()
	var runs atomic.Int32
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("slow", func(ctx context.Context, _ *worker.Task) error {
		runs.Add(1)
		select {
		case <-time.After(5 * time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))

	_, js := b.Server.Connect()
	w, err := worker.New(ctx, js, &worker.Config{Registry: reg, AckWait: 30 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	err = w.Start(ctx)
	require.ErrorIs(t, err, worker.ErrConfigMismatch)
	require.ErrorContains(t, err, "AckWait is 30s here but 3s on consumer AX_P0/p0-s00")

	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "slow"})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
}

// Heartbeats count only when the consumer answers them: with the consumer
// gone (nothing answers "+WPI" on its ack subject) the claim lapses and the
// handler is cancelled with ErrClaimLapsed. With the old flush-confirmed
// heartbeats the connected server's flush answer kept the claim alive and
// the handler ran on to its timeout.
func TestHeartbeatCountsOnlyWhenConsumerAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: 3 * time.Second})
	ctx := context.Background()
	reg, causes := blocking(t)
	const key = "k-beat"
	shard := streams.Shard(key)
	b.StartWorker(t, worker.Config{Registry: reg, Shards: []int{shard}})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "block", Key: key, Priority: ax.P2})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateRunning)
	names := streams.DefaultNames()
	require.NoError(t, b.JS.DeleteConsumer(ctx, names.PriorityStream(2), names.ConsumerName(2, shard)))
	requireCause(t, causes, worker.ErrClaimLapsed)
}

// A handler sees a fence that grows with each execution of its task and
// names the record revision of its claim, and Held is true while it holds
// the task and false once its context ended.
func TestHandlerFenceAndHeld(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	type seen struct {
		fence       worker.Fence
		held, after bool
		rev         uint64 // the record's revision while the handler runs
	}
	runs := make(chan seen, 2)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("fenced", func(ctx context.Context, task *worker.Task) error {
		_, rev, err := b.Store.Get(ctx, kv.Ref{Tenant: task.Tenant, ID: task.ID})
		if err != nil {
			return err
		}
		s := seen{fence: task.Fence(), held: task.Held(), rev: rev}
		if task.Attempt == 1 {
			<-ctx.Done() // the 1s timeout
			s.after = task.Held()
			runs <- s
			return context.Cause(ctx)
		}
		runs <- s
		return nil
	}, &worker.TypeConfig{Timeout: time.Second, Backoff: worker.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond}}))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "fenced"})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateSucceeded)
	first, second := <-runs, <-runs
	require.True(t, first.held)
	require.False(t, first.after, "Held is false once the context ended")
	require.True(t, second.held)
	require.Equal(t, info.ID, first.fence.Task)
	require.True(t, first.fence.Less(second.fence))
	require.False(t, second.fence.Less(first.fence))
	require.Equal(t, uint64(1), first.fence.Delivery)
	require.Equal(t, uint64(2), second.fence.Delivery)

	// Each fence is the revision of the claim that moved the record to
	// RUNNING (nothing else writes the record while the handler runs).
	require.Equal(t, first.rev, first.fence.Revision)
	require.Equal(t, second.rev, second.fence.Revision)
}

// A handler that ignores its context keeps its task's claim and its slot
// until it returns; past AbandonAfter its task is dead-lettered with a
// reason a person understands, and only then does the slot take the next
// task. The old worker failed the attempt 1s after the timeout and ran the
// task again, and the next task, while the first handler still ran.
func TestStuckHandlerHoldsClaimAndSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: 3 * time.Second})
	ctx := context.Background()
	var stuckRuns atomic.Int32
	release := make(chan struct{})
	quick := make(chan time.Time, 1)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("stuck", func(context.Context, *worker.Task) error {
		stuckRuns.Add(1)
		<-release // ignores its context
		return nil
	}, &worker.TypeConfig{Timeout: time.Second}))
	require.NoError(t, reg.Handle("quick", func(context.Context, *worker.Task) error {
		quick <- time.Now()
		return nil
	}, nil))
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 1, AbandonAfter: 4 * time.Second, MemberTTL: memberTTL})
	t.Cleanup(func() { close(release) }) // runs before the worker's Stop

	stuck, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "stuck"})
	require.NoError(t, err)
	b.WaitState(t, stuck.ID, kv.StateRunning)
	next, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "quick"})
	require.NoError(t, err)

	rec := b.WaitState(t, stuck.ID, kv.StateDead)
	require.Equal(t, int32(1), stuckRuns.Load(), "never run twice")
	require.Contains(t, rec.LastError, "handler did not return within 4s after its timeout (1s)")
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>DEAD"}, axtest.Moves(rec))
	require.Equal(t, int64(1), w.Stats().Abandoned)
	started := <-quick
	require.False(t, started.Before(*rec.FinishedAt), "the slot was reused only after the burial")
	b.WaitState(t, next.ID, kv.StateSucceeded)
}

// A lapsed execution that returns late and the takeover of its redelivery
// on the same worker never run at once: the redelivery waits until the
// lapsed one has returned (the old worker ran both side by side). Their
// cancel funcs are tracked apart: after the lapsed one returns, an
// operator's cancel still reaches the live one (the old worker kept one
// cancel func per task id, which the lapsed execution deleted on return,
// so the notice reached nothing: "noted").
func TestCancelReachesEveryExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: 2 * time.Second})
	ctx := context.Background()
	var execs atomic.Int32
	first, secondStarted := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	second := make(chan error, 1)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("twice", func(ctx context.Context, _ *worker.Task) error {
		if execs.Add(1) == 1 {
			close(first)
			<-release // ignores its context past its lapse
			return nil
		}
		close(secondStarted)
		<-ctx.Done()
		second <- context.Cause(ctx)
		return ctx.Err()
	}, nil))
	w, nc := b.StartWorker(t, worker.Config{ID: "w-two", Registry: reg, Concurrency: 2, MemberTTL: memberTTL,
		Test: worker.TestConfig{SkipHeartbeat: func(delivered uint64) bool { return delivered == 1 }}})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "t-two", Type: "twice"})
	require.NoError(t, err)
	<-first
	select {
	case <-secondStarted:
		t.Fatal("the redelivery ran beside the lapsed execution, which has not returned")
	case <-time.After(3 * 2 * time.Second): // three ack waits: redelivered meanwhile
	}
	require.Positive(t, w.Stats().Dropped, "the redelivery was put off while the lapsed execution is in flight")
	close(release)
	select {
	case <-secondStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("the redelivery was not taken over once the lapsed execution returned")
	}

	_, _, err = b.Store.Transition(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID}, kv.StateRunning, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil)
	require.NoError(t, err)
	reply, err := nc.Request(streams.DefaultNames().WorkerCancelSubject("w-two"), []byte(kv.Ref{Tenant: info.Tenant, ID: info.ID}.Key()), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, worker.CancelReplyCancelled, string(reply.Data))
	requireCause(t, second, worker.ErrCancelled)
}

// A DEAD write that fails without a definite conflict (here: the record is
// too large for the bucket for a moment) keeps the dead letter; the task is
// later buried again, with a fresh Nats-Msg-Id, and its dlq_seq names a
// letter that exists. The old worker deleted the letter on any failure and
// the re-bury deduplicated onto it: DEAD with a dangling dlq_seq.
func TestDeadLetterKeptWhenDeadWriteFails(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: 2 * time.Second})
	ctx := context.Background()
	tasks, err := b.JS.Stream(ctx, "KV_AX_TASKS")
	require.NoError(t, err)
	setMaxMsgSize := func(n int32) {
		cfg := tasks.CachedInfo().Config
		cfg.MaxMsgSize = n
		_, err := b.JS.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	var runs atomic.Int32
	submitted := make(chan struct{})
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("doomed", func(context.Context, *worker.Task) error {
		if runs.Add(1) == 1 {
			<-submitted       // the client has written its record
			setMaxMsgSize(64) // the DEAD write will fail, not by a conflict
		}
		return worker.Permanent(errors.New("card declined"))
	}, nil))
	core, logs := observer.New(zapcore.WarnLevel)
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL, Logger: zap.New(core)})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "doomed"})
	close(submitted)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return logs.FilterMessage("final_write_failed").Len() > 0 },
		20*time.Second, 20*time.Millisecond)
	setMaxMsgSize(-1)

	rec := b.WaitState(t, info.ID, kv.StateDead)
	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	letter, err := dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(t, err, "dlq_seq %d names a letter that exists", rec.DLQSeq)
	require.Equal(t, info.ID, letter.Header.Get(streams.HeaderTaskID))
}

// With AX_DLQ gone, a permanently failing task is decided once: the record
// keeps the decision (Burying) and the trail names the dead-letter stream's
// error; each redelivery goes straight to burying without running the
// handler, with a growing backoff; once the stream is back the task is
// DEAD. The old worker ran the handler again every ~1.5s and blamed a
// lapsed claim.
func TestDeadLetterOutageBuriesWithoutRerun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, b.JS.DeleteStream(ctx, "AX_DLQ"))
	var runs atomic.Int32
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("doomed", func(context.Context, *worker.Task) error {
		runs.Add(1)
		return worker.Permanent(errors.New("card declined"))
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "doomed"})
	require.NoError(t, err)

	burying := func(rec *kv.Record) []kv.Move {
		var out []kv.Move
		for _, m := range rec.Trail {
			if m.Action == "burying" {
				out = append(out, m)
			}
		}
		return out
	}
	require.Eventually(t, func() bool {
		rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		return err == nil && len(burying(rec)) >= 2
	}, 30*time.Second, 50*time.Millisecond, "a redelivery goes back to burying")
	require.Equal(t, int32(1), runs.Load(), "the handler ran once")
	rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, "permanent: card declined", rec.Burying)
	require.Contains(t, burying(rec)[0].Error, "dead-letter stream unavailable")
	for _, m := range rec.Trail {
		require.NotContains(t, m.Error, "lapsed")
	}

	_, err = streams.Provision(ctx, b.JS, nil) // the stream is back
	require.NoError(t, err)
	rec = b.WaitState(t, info.ID, kv.StateDead)
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, "permanent: card declined", rec.LastError)
	require.Empty(t, rec.Burying)
	require.NotZero(t, rec.DLQSeq)
	require.Equal(t, 1, rec.Attempt, "burying runs no attempt")
}

// A huge error is cut to 4 KiB, with a marker, in the record, in its trail
// and in the dead letter's Ax-Error header, and the task is buried. The old
// worker could not publish the 2 MB header nor write the record, and the
// task cycled.
func TestHugeErrorIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	huge := strings.Repeat("é", 1<<20) // 2 MB
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("loud", func(context.Context, *worker.Task) error {
		return worker.Permanent(errors.New(huge))
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "loud"})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateDead)
	require.LessOrEqual(t, len(rec.LastError), kv.MaxErrorLen)
	require.Contains(t, rec.LastError, "[cut: 2097163 bytes in all]")
	require.LessOrEqual(t, len(rec.LastMove().Error), kv.MaxErrorLen)
	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	letter, err := dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(t, err)
	require.LessOrEqual(t, len(letter.Header.Get(streams.HeaderError)), kv.MaxErrorLen)
	require.Contains(t, letter.Header.Get(streams.HeaderError), "[cut: ")
}

// A task whose attempts were all lost with their workers (the record says
// attempt 3 of 3, all lost) is buried on its next claim without running,
// with a reason naming the lost attempts and the last lost worker. The old
// worker ran it again.
func TestLostAttemptsAreBuried(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	var runs atomic.Int32
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("crasher", func(context.Context, *worker.Task) error {
		runs.Add(1)
		return nil
	}, nil))
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "lost-attempts", Type: "crasher", MaxAttempts: 3}) // recorded at submit: its record is rewritten below
	require.NoError(t, err)
	// As three takeovers of lost attempts leave it (no worker runs yet).
	_, _, err = b.Store.Transition(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID}, kv.StateReady, kv.StateReady,
		kv.Actor{Worker: "w-x", Action: "takeover", Error: "claim of worker w-dead (delivery 3) lapsed"}, func(r *kv.Record) error {
			r.Attempt, r.Lost, r.LastError = 3, 3, "claim of worker w-dead (delivery 3) lapsed"
			return nil
		})
	require.NoError(t, err)
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	rec := b.WaitState(t, info.ID, kv.StateDead)
	require.Zero(t, runs.Load())
	require.Contains(t, rec.LastError, "task abandoned: 3 of its 3 attempts were lost with their worker (crash, freeze or cut-off); last: claim of worker w-dead")
	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	_, err = dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(t, err)
}

// The fault suites' probe checks Held right before its effect and journals
// the attempt with its execution's fence.
func TestProbeJournalsFencedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	path := t.TempDir() + "/probe.jsonl"
	probe, err := builtin.NewProbe(ctx, b.JS, path, "PROBE_EFFECTS")
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	reg := worker.NewRegistry()
	require.NoError(t, probe.Register(reg))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":10}`)})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateSucceeded)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev builtin.ProbeEvent
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		events = append(events, ev.Event)
		require.NotZero(t, ev.Revision, "every event carries the fence")
		require.Equal(t, uint64(1), ev.Delivery)
	}
	require.Equal(t, []string{"start", "effect", "finish"}, events)
}

// A claim whose write landed but whose reply was lost runs once, counting
// no lost attempt. Before, the worker naked its own claim, took it over at
// the next delivery as if its worker were lost, and a task on its last
// attempt went DEAD "abandoned" without ever running.
func TestLostClaimReplyRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var runs atomic.Int32
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("once", func(context.Context, *worker.Task) error { runs.Add(1); return nil }, nil))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL,
		Test: worker.TestConfig{LoseClaimReply: func(delivered uint64) bool { return delivered == 1 }}})
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "once", MaxAttempts: 1})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, 1, rec.Attempt)
	require.Zero(t, rec.Lost)
	require.EqualValues(t, 1, runs.Load())
}
