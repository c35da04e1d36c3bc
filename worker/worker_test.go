package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(natstest.LeakOptions(),
		goleak.IgnoreTopFunction("time.Sleep"),
	)...)
}

// testBundle is axtest's bundle with this package's own helpers.
type testBundle struct{ *axtest.Bundle }

// setup is [axtest.Setup] with the deployment cfg (nil: the defaults).
func setup(t testing.TB, cfg *streams.Config) *testBundle {
	t.Helper()
	return &testBundle{axtest.Setup(t, axtest.Options{Streams: cfg})}
}

// setupFast is setup for a test of the fast tier (go test -short).
func setupFast(t testing.TB) *testBundle {
	t.Helper()
	return &testBundle{axtest.Fast(t)}
}

// fallbackID waits for the record of a message published without a
// Nats-Msg-Id to stream at seq, and returns its id
// ("<stream>-<seq>-<store time in hex nanoseconds>").
func (b *testBundle) fallbackID(t *testing.T, stream string, seq uint64) string {
	t.Helper()
	prefix := fmt.Sprintf("%s-%d-", stream, seq)
	var id string
	require.Eventually(t, func() bool {
		lister, err := b.Store.Bucket().ListKeys(context.Background())
		if err != nil {
			return false
		}
		defer func() { _ = lister.Stop() }()
		for key := range lister.Keys() {
			if ref, err := kv.ParseKey(key); err == nil && strings.HasPrefix(ref.ID, prefix) {
				id = ref.ID
			}
		}
		return id != ""
	}, 30*time.Second, 20*time.Millisecond, "no record named %s…", prefix)
	return id
}

// A task published by a plain NATS client runs once and reads SUCCEEDED,
// with the trail READY -> RUNNING -> SUCCEEDED.
func TestRawPublishRunsOnce(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	var runs sync.Map
	reg := worker.NewRegistry()
	require.NoError(t, worker.HandleJSON(reg, "sleep", func(ctx context.Context, task *worker.Task, args builtin.SleepArgs) error {
		n, _ := runs.LoadOrStore(task.ID, new(int))
		*n.(*int)++
		return builtin.Sleep(ctx, task, args)
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg})

	nc, _ := b.Server.Connect()
	require.NoError(t, nc.Publish("ax.submit.p2.acme.sleep.k1", []byte(`{"ms":10}`)))
	require.NoError(t, nc.Flush())

	id := b.fallbackID(t, "AX_P2", 1) // no Nats-Msg-Id: the id is the stream, sequence and store time
	rec := b.WaitState(t, id, kv.StateSucceeded)
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
	require.Equal(t, "acme", rec.Tenant)
	require.Equal(t, 2, rec.Priority)
	require.Equal(t, 1, rec.Attempt)
	n, _ := runs.Load(id)
	require.Equal(t, 1, *n.(*int))
}

// With 1,000 P4 tasks queued and then 10 P0 tasks submitted, each P0 task
// starts before any P4 task that had not started when they were submitted,
// whatever the priority policy of the shard consumers.
func TestStrictPriority(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"none", "overflow", "pinned_client"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			testStrictPriority(t, policy)
		})
	}
}

func testStrictPriority(t *testing.T, policy string) {
	b := setup(t, &streams.Config{PriorityPolicy: policy})
	ctx := context.Background()
	var mu sync.Mutex
	var starts []int // priorities, in start order
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		starts = append(starts, levelOf(task.Priority))
		mu.Unlock()
		// Longer than the P0 messages take to reach the worker after the
		// submit returns on a loaded machine (a submit of tasks of
		// generated ids returns at the publish acks: 20 ms let two slots
		// free meanwhile under the whole suite).
		time.Sleep(50 * time.Millisecond)
		return nil
	}, nil))
	backlog := make([]ax.TaskSpec, 1000)
	for i := range backlog {
		backlog[i] = ax.TaskSpec{Type: "job", Priority: ax.P4}
	}
	_, err := b.Client.SubmitBatch(ctx, backlog)
	require.NoError(t, err)

	const concurrency = 2
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: concurrency})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(starts) >= 20 }, 30*time.Second, 5*time.Millisecond)

	urgent := make([]ax.TaskSpec, 10)
	for i := range urgent {
		urgent[i] = ax.TaskSpec{Type: "job", Priority: ax.P0}
	}
	mu.Lock()
	before := len(starts)
	mu.Unlock()
	_, err = b.Client.SubmitBatch(ctx, urgent)
	require.NoError(t, err)
	mu.Lock()
	submitted := len(starts)
	mu.Unlock()

	last := lastP0Start(t, &mu, &starts, 10)
	// Only slots that freed while the P0 messages were in flight may have
	// started P4 tasks; every other P4 task waits for all ten P0 tasks.
	require.LessOrEqual(t, last, submitted+10+concurrency-1,
		"the last P0 task started at position %d; %d tasks had started before the submit, %d when it returned", last, before, submitted)
}

// lastP0Start waits until n P0 tasks have started (starts lists the
// priorities in start order, guarded by mu) and returns the position of
// the last of them.
func lastP0Start(t *testing.T, mu *sync.Mutex, starts *[]int, n int) int {
	t.Helper()
	last := -1
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := 0
		for i, p := range *starts {
			if p == 0 {
				seen, last = seen+1, i
			}
		}
		return seen == n
	}, 30*time.Second, 5*time.Millisecond)
	return last
}

// A task that fails twice then succeeds has attempts=3, and the gaps
// between attempts grow as the backoff formula says.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var mu sync.Mutex
	var at []time.Time
	reg := worker.NewRegistry()
	base := 150 * time.Millisecond
	require.NoError(t, worker.HandleJSON(reg, "sleep", func(ctx context.Context, task *worker.Task, args builtin.SleepArgs) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return builtin.Sleep(ctx, task, args)
	}, &worker.TypeConfig{Backoff: worker.Backoff{Base: base}}))
	b.StartWorker(t, worker.Config{Registry: reg})

	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "sleep", Payload: []byte(`{"fail":2}`)})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, 3, rec.Attempt)
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>RETRYING", "RETRYING>RUNNING", "RUNNING>RETRYING", "RETRYING>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, at, 3)
	gap1, gap2 := at[1].Sub(at[0]), at[2].Sub(at[1])
	// delay(n) = min(cap, base*2^(n-1)) + uniform(0, base/2)
	require.GreaterOrEqual(t, gap1, base)
	require.Less(t, gap1, base+base/2+time.Second, "gap 1 %s", gap1)
	require.GreaterOrEqual(t, gap2, 2*base)
	require.Less(t, gap2, 2*base+base/2+time.Second, "gap 2 %s", gap2)
	// The doubling is in the lower bounds: each gap is its delay plus the
	// time its redelivery and claim took, which under load may make the
	// first longer than the second (570 ms against 476 ms once).
}

// A task that sleeps past its timeout is cancelled through its context and
// retried; after its max attempts it is DEAD and its message is in AX_DLQ.
func TestTimeoutThenDead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	var mu sync.Mutex
	var causes []error
	reg := worker.NewRegistry()
	require.NoError(t, worker.HandleJSON(reg, "sleep", func(ctx context.Context, task *worker.Task, args builtin.SleepArgs) error {
		err := builtin.Sleep(ctx, task, args)
		mu.Lock()
		causes = append(causes, context.Cause(ctx))
		mu.Unlock()
		return err
	}, &worker.TypeConfig{Backoff: worker.Backoff{Base: 10 * time.Millisecond}}))
	b.StartWorker(t, worker.Config{Registry: reg})

	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "sleep", Tenant: "acme", Payload: []byte(`{"ms":60000}`),
		Timeout: 100 * time.Millisecond, MaxAttempts: 2})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateDead)
	require.Equal(t, 2, rec.Attempt)
	require.Contains(t, rec.LastError, "task timed out after 100ms")
	var timedOut []string
	for _, m := range rec.Trail {
		if m.TimedOut {
			timedOut = append(timedOut, string(m.To))
		}
	}
	require.Equal(t, []string{"RETRYING", "DEAD"}, timedOut, "both failed attempts are marked timed out")
	require.NotZero(t, rec.DLQSeq)
	mu.Lock()
	require.Len(t, causes, 2)
	for _, c := range causes {
		require.ErrorIs(t, c, worker.ErrTimeout)
	}
	mu.Unlock()

	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	msg, err := dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(t, err)
	require.Equal(t, "ax.dlq.acme.sleep", msg.Subject)
	require.Equal(t, info.ID, msg.Header.Get(streams.HeaderTaskID))
	require.Equal(t, "2", msg.Header.Get(streams.HeaderAttempts))
	require.Contains(t, msg.Header.Get(streams.HeaderError), "timed out")
	require.Equal(t, "ax.submit.p2.acme.sleep."+info.ID, msg.Header.Get(streams.HeaderSubject))
	require.JSONEq(t, `{"ms":60000}`, string(msg.Data))

	// The message left its bucket.
	bucket, err := b.JS.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		i, err := bucket.Info(ctx)
		return err == nil && i.State.Msgs == 0
	}, 5*time.Second, 20*time.Millisecond)
}

// A task whose handler asks for a retry (RetryAfter) on its last attempt
// dies with a reason that says the retries ran out and gives the handler's
// error, not "retry after …", in its record and its dead letter.
func TestRetryAfterExhaustedReason(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("gateway", func(ctx context.Context, task *worker.Task) error {
		return worker.RetryAfter(20*time.Millisecond, errors.New("gateway busy"))
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg})

	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "gateway", MaxAttempts: 2})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateDead)
	const want = "retries exhausted (attempt 2 of 2): gateway busy"
	require.Equal(t, want, rec.LastError)
	require.Equal(t, "retry after 20ms: gateway busy", rec.Trail[len(rec.Trail)-3].Error, "the retry's own move keeps its delay")
	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	msg, err := dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(t, err)
	require.Equal(t, want, msg.Header.Get(streams.HeaderError))
}

// A worker that dies mid-task (its connection closes without an ack) loses
// the task to another worker, which completes it; the trail shows both.
func TestDeadWorkerTaskIsTakenOver(t *testing.T) {
	t.Parallel()
	// 3 s, not 1 s: a loaded CI machine can starve A's heartbeats for a
	// second, and A's claim would lapse (a takeover by A itself) before
	// the test kills it.
	const ackWait = 3 * time.Second
	b := setup(t, &streams.Config{AckWait: ackWait})
	ctx := context.Background()

	started := make(chan string, 1)
	blocked := worker.NewRegistry()
	require.NoError(t, blocked.Handle("job", func(ctx context.Context, task *worker.Task) error {
		started <- task.Worker
		<-ctx.Done()
		return ctx.Err()
	}, nil))
	_, ncA := b.StartWorker(t, worker.Config{ID: "A", Registry: blocked, AckWait: ackWait, GracePeriod: 100 * time.Millisecond})

	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "job"})
	require.NoError(t, err)
	require.Equal(t, "A", <-started)
	ncA.Close() // A dies: no ack, no heartbeat

	done := worker.NewRegistry()
	require.NoError(t, done.Handle("job", func(context.Context, *worker.Task) error { return nil }, nil))
	b.StartWorker(t, worker.Config{ID: "B", Registry: done, AckWait: ackWait})

	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, "B", rec.Worker)
	require.Equal(t, 2, rec.Attempt, "the lost attempt counts")
	require.Equal(t, 1, rec.Lost)
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
	takeover := rec.Trail[2]
	require.Equal(t, "takeover", takeover.Action)
	require.Contains(t, takeover.Error, "worker A")
}

// Malformed messages go to the DLQ with a reason; the worker keeps going.
func TestMalformedTasksAreDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.StartWorker(t, worker.Config{})
	_, js := b.Server.Connect()

	cases := []struct {
		name, subject, body string
		headers             map[string]string
		reason              string
	}{
		{"bad timeout", "ax.submit.p1.acme.echo.k", "x", map[string]string{"Ax-Timeout": "soon"}, "Ax-Timeout"},
		{"bad attempts", "ax.submit.p1.acme.echo.k", "x", map[string]string{"Ax-Max-Attempts": "-2"}, "Ax-Max-Attempts"},
		{"bad id", "ax.submit.p1.acme.echo.k", "x", map[string]string{"Nats-Msg-Id": "a b"}, "Nats-Msg-Id"},
		// Issue 17.12: at 54cd21a these were accepted.
		{"timeout above the bound", "ax.submit.p1.acme.echo.k", "x", map[string]string{"Ax-Timeout": "1000h"}, "above the limit"},
		{"run time too far ahead", "ax.submit.p1.acme.echo.k", "x", map[string]string{"Ax-Run-At": "2099-01-01T00:00:00Z"}, "ahead"},
		{"bad json", "ax.submit.p1.acme.sleep.k", "{not json", nil, "bad task payload"},
		{"binary junk", "ax.submit.p1.acme.sleep.k", "\x00\xff\xfe", nil, "bad task payload"},
	}
	var seqs []uint64
	for _, c := range cases {
		msg := nats.NewMsg(c.subject)
		msg.Data = []byte(c.body)
		for k, v := range c.headers {
			msg.Header.Set(k, v)
		}
		ack, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err, c.name)
		seqs = append(seqs, ack.Sequence)
	}
	good, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "echo", Priority: ax.P1})
	require.NoError(t, err)
	b.WaitState(t, good.ID, kv.StateSucceeded)

	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	for i, c := range cases {
		rec := b.WaitState(t, b.fallbackID(t, "AX_P1", seqs[i]), kv.StateDead)
		require.Contains(t, rec.LastError, c.reason, c.name)
		msg, err := dlq.GetMsg(ctx, rec.DLQSeq)
		require.NoError(t, err, c.name)
		require.Contains(t, msg.Header.Get(streams.HeaderError), c.reason, c.name)
		require.Equal(t, c.body, string(msg.Data), c.name)
	}
}

// Stop lets a running task finish its grace period, then puts it back
// READY (attempt not counted) for another worker.
func TestStopPutsRunningTaskBack(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	var cause error
	slow := worker.NewRegistry()
	require.NoError(t, slow.Handle("job", func(ctx context.Context, task *worker.Task) error {
		started <- struct{}{}
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}, nil))
	_, js := b.Server.Connect()
	w, err := worker.New(ctx, js, &worker.Config{ID: "A", Registry: slow, GracePeriod: 200 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "job"})
	require.NoError(t, err)
	<-started
	require.NoError(t, w.Stop(ctx))
	require.ErrorIs(t, cause, worker.ErrStop)
	rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, rec.State)
	require.Equal(t, 0, rec.Attempt)
	require.Equal(t, "worker_stopped", rec.LastMove().Action)

	fast := worker.NewRegistry()
	require.NoError(t, fast.Handle("job", func(context.Context, *worker.Task) error { return nil }, nil))
	b.StartWorker(t, worker.Config{ID: "B", Registry: fast})
	rec = b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, 1, rec.Attempt)
}

// A permanent error and a panic go straight to the DLQ.
func TestPermanentAndPanic(t *testing.T) {
	t.Parallel()
	b := setupFast(t)
	ctx := context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, builtin.Register(reg, nil))
	require.NoError(t, reg.Handle("boom", func(context.Context, *worker.Task) error { panic("kaboom") }, nil))
	b.StartWorker(t, worker.Config{Registry: reg})
	fail, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "fail", MaxAttempts: 5})
	require.NoError(t, err)
	boom, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "boom", MaxAttempts: 5})
	require.NoError(t, err)
	rec := b.WaitState(t, fail.ID, kv.StateDead)
	require.Equal(t, 1, rec.Attempt)
	require.ErrorContains(t, errors.New(rec.LastError), "fails by design")
	rec = b.WaitState(t, boom.ID, kv.StateDead)
	require.Equal(t, 1, rec.Attempt)
	require.Contains(t, rec.LastError, "handler panicked: kaboom")
}

// A task whose deadline passed before it started is not run.
func TestDeadlinePassed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	msg := nats.NewMsg("ax.submit.p0.acme.echo.late")
	msg.Header.Set(streams.HeaderDeadline, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	msg.Header.Set(streams.HeaderMsgID, "late")
	_, err := b.JS.PublishMsg(ctx, msg)
	require.NoError(t, err)
	b.StartWorker(t, worker.Config{})
	rec := b.WaitState(t, "late", kv.StateDead)
	require.Contains(t, rec.LastError, "deadline passed")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	_, err := worker.New(context.Background(), js, &worker.Config{})
	require.ErrorContains(t, err, "Registry is required")
	_, err = worker.New(context.Background(), js, &worker.Config{Registry: worker.NewRegistry(), Shards: []int{40}})
	require.ErrorContains(t, err, "shard 40")
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("x", func(context.Context, *worker.Task) error { return nil }, nil))
	require.ErrorContains(t, reg.Handle("x", func(context.Context, *worker.Task) error { return nil }, nil), "already registered")
	require.ErrorContains(t, reg.Handle("a.b", func(context.Context, *worker.Task) error { return nil }, nil), "task type")
}
