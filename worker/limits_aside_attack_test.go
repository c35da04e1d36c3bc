package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// steppedAsideIn reports whether rec's trail shows its task stepped aside.
func steppedAsideIn(rec *kv.Record) bool {
	return slices.ContainsFunc(rec.Trail, func(m kv.Move) bool { return m.Action == worker.ActionSteppedAside })
}

// A limited backlog submitted by a publish-only client (a producer that
// may not write records: the shipped service role, ax submit
// --publish-only) steps aside too. Its messages carry Ax-Gen, so the
// worker takes them for Go submits whose records are on their way, and
// the records never come: the worker must write them. Fails if it never
// does: every delivery that finds no room to park is naked, the backlog
// fills its consumer, and the unlimited tasks behind it wait.
func TestPublishOnlyBacklogStepsAside(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	producer, err := ax.NewClient(ctx, b.JS, &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	var limited, free gauge
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("partner", limited.handler(100*time.Millisecond), nil))
	require.NoError(t, reg.Handle("email", free.handler(0), nil))
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change

	var specs []ax.TaskSpec
	for i := range 60 {
		specs = append(specs, ax.TaskSpec{Type: "partner", Key: "k", ID: fmt.Sprintf("partner-%d", i), Priority: ax.P2})
	}
	_, err = producer.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	var emails []ax.TaskSpec
	for i := range 10 {
		emails = append(emails, ax.TaskSpec{Type: "email", Key: "k", ID: fmt.Sprintf("email-%d", i), Priority: ax.P2})
	}
	_, err = producer.SubmitBatch(ctx, emails)
	require.NoError(t, err)
	for _, e := range emails {
		b.WaitState(t, e.ID, kv.StateSucceeded)
	}
	ranBefore := limited.executions.Load()
	require.LessOrEqual(t, ranBefore, int64(20), "the unlimited tasks waited behind the limited backlog")

	aside := 0
	for _, s := range specs {
		rec := b.WaitState(t, s.ID, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt)
		if steppedAsideIn(rec) {
			aside++
		}
	}
	require.Equal(t, int64(60), limited.executions.Load())
	require.Equal(t, 1, limited.peakNow())
	require.Positive(t, aside, "no publish-only task stepped aside")
	require.Positive(t, w.Stats().SteppedAside)
	t.Logf("limited tasks run before the last unlimited one ended: %d of 60; stepped aside: %d", ranBefore, aside)
}

// countingGate is a handler that counts each task's executions and holds
// those of open tasks until release is closed.
type countingGate struct {
	mu       sync.Mutex
	runs     map[string]int
	payloads map[string]string    // the payload of each task's last execution
	started  map[string]time.Time // when each task's last execution started
	now      int
	peak     int
	release  chan struct{}
}

func newCountingGate() *countingGate {
	return &countingGate{runs: map[string]int{}, payloads: map[string]string{}, started: map[string]time.Time{},
		release: make(chan struct{})}
}

func (g *countingGate) handler(ctx context.Context, task *worker.Task) error {
	g.mu.Lock()
	g.runs[task.ID]++
	g.payloads[task.ID] = string(task.Payload)
	g.started[task.ID] = time.Now()
	g.now++
	g.peak = max(g.peak, g.now)
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
	return nil
}

func (g *countingGate) ran(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[id]
}

func (g *countingGate) execution(id string) (payload string, started time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.payloads[id], g.started[id]
}

func (g *countingGate) peakNow() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak
}

func (g *countingGate) running() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now
}

// asideBundle is a worker whose one slot of limit "partner" is held by a
// blocked task, on a deployment whose consumers park one delivery each
// (MaxAckPending 4, a parking room of 2 besides the blocked task): the
// other "partner" tasks on its key step aside.
type asideBundle struct {
	*testBundle
	w    *worker.Worker
	gate *countingGate
	api  *admin.Client
}

func setupAside(t *testing.T, leader bool) *asideBundle {
	t.Helper()
	b := setup(t, &streams.Config{MaxAckPending: 4})
	if leader {
		b.StartLeader(t, scheduler.Config{})
	}
	ctx := context.Background()
	api := b.StartAdmin(t, nil)
	g := newCountingGate()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("partner", g.handler, nil))
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 4})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: "blocker", Priority: ax.P2})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return g.running() == 1 }, 10*time.Second, 5*time.Millisecond)
	for _, id := range []string{"filler-1", "filler-2"} { // the parking room
		_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return w.Stats().Limited >= 2 }, 10*time.Second, 5*time.Millisecond)
	return &asideBundle{testBundle: b, w: w, gate: g, api: api}
}

// waitAside waits until task id waits stepped aside: PENDING, its last
// move a step aside.
func (b *asideBundle) waitAside(t *testing.T, id string) *kv.Record {
	t.Helper()
	var rec *kv.Record
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, _, err := b.Store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
		if err != nil {
			return false
		}
		rec = r
		return r.State == kv.StatePending && len(r.Trail) > 0 && r.Trail[len(r.Trail)-1].Action == worker.ActionSteppedAside
	}, 30*time.Second, 2*time.Millisecond, "task %s never waited stepped aside", id)
	return rec
}

// An operator's verbs on tasks that wait stepped aside (PENDING, their
// schedule in AX_DELAYED): get and trail show stepped_aside; a cancelled
// one never runs, even once its schedule fires; a paused one waits past
// its run time and runs once when resumed; a reprioritized one is released
// at its new priority and runs once. Each at a moment it is PENDING.
func TestOperatorVerbsOnSteppedAsideTasks(t *testing.T) {
	t.Parallel()
	b := setupAside(t, true)
	ctx := context.Background()
	ids := []string{"get", "cancel", "pause", "reprioritize"}
	for _, id := range ids {
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}

	b.waitAside(t, "get")
	got, err := b.api.Get(ctx, admin.TaskRequest{ID: "get"})
	require.NoError(t, err)
	require.Contains(t, []kv.State{kv.StatePending, kv.StateReady}, got.Task.State)
	trail, err := b.api.Trail(ctx, admin.TaskRequest{ID: "get"})
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(trail.Trail, func(m kv.Move) bool { return m.Action == worker.ActionSteppedAside }))

	// fromPending checks that a verb's move left PENDING: it met the task
	// stepped aside, not released meanwhile.
	fromPending := func(reply *admin.TaskReply) {
		t.Helper()
		last := reply.Task.Trail[len(reply.Task.Trail)-1]
		require.Equal(t, kv.StatePending, last.From, "the verb met the task %s, not stepped aside", last.From)
	}
	var lastRunAt time.Time
	b.waitAside(t, "cancel")
	cancelled, err := b.api.Cancel(ctx, admin.TaskRequest{ID: "cancel"})
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, cancelled.Task.State)
	fromPending(cancelled)

	rec := b.waitAside(t, "pause")
	lastRunAt = *rec.RunAt
	paused, err := b.api.Pause(ctx, admin.TaskRequest{ID: "pause"})
	require.NoError(t, err)
	require.Equal(t, kv.StatePaused, paused.Task.State)
	fromPending(paused)

	rec = b.waitAside(t, "reprioritize")
	lastRunAt = later(lastRunAt, *rec.RunAt)
	moved, err := b.api.Reprioritize(ctx, admin.ReprioritizeRequest{ID: "reprioritize", Priority: 0})
	require.NoError(t, err)
	require.Equal(t, 0, moved.Task.Priority)
	require.Equal(t, kv.StatePending, moved.Task.State)
	fromPending(moved)

	// Past the paused task's run time: it stays paused, while the others
	// still wait on the slot.
	time.Sleep(time.Until(lastRunAt.Add(2 * time.Second)))
	require.Equal(t, kv.StatePaused, b.WaitState(t, "pause", kv.StatePaused).State)
	close(b.gate.release)
	for _, id := range []string{"blocker", "filler-1", "filler-2", "get", "reprioritize"} {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	require.Equal(t, 0, b.WaitState(t, "reprioritize", kv.StateSucceeded).Priority)
	require.Zero(t, b.gate.ran("pause"), "the paused task ran")
	_, err = b.api.Resume(ctx, admin.TaskRequest{ID: "pause"})
	require.NoError(t, err)
	b.WaitState(t, "pause", kv.StateSucceeded)

	time.Sleep(2 * time.Second) // every schedule written has fired by now
	require.Zero(t, b.gate.ran("cancel"), "the cancelled task ran")
	require.Equal(t, kv.StateCancelled, b.WaitState(t, "cancel", kv.StateCancelled).State)
	for _, id := range []string{"blocker", "filler-1", "filler-2", "get", "pause", "reprioritize"} {
		require.Equal(t, 1, b.gate.ran(id), "task %s", id)
		r := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, 1, r.Attempt, "task %s", id)
	}
	require.Equal(t, 1, b.gate.peakNow())
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Tasks that wait stepped aside when their limit changes run once each
// when released: with the limit removed, at once and side by side; with
// it raised, at most as many at once as the new limit says.
func TestLimitChangedWhileSteppedAside(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limits kv.Limits
		peak   int // the most running at once, the blocked task included
	}{
		{name: "removed", limits: kv.Limits{}, peak: 4}, // the worker's concurrency
		{name: "raised", limits: kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 3}}}, peak: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupAside(t, true)
			ctx := context.Background()
			ids := []string{"blocker", "filler-1", "filler-2"}
			for i := range 6 {
				id := fmt.Sprintf("waiting-%d", i)
				ids = append(ids, id)
				_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2})
				require.NoError(t, err)
			}
			for _, id := range ids[3:6] {
				b.waitAside(t, id)
			}
			setLimits(t, b.JS, tc.limits)
			require.Eventually(t, func() bool { return b.gate.running() == tc.peak }, 20*time.Second, 5*time.Millisecond,
				"the tasks the change lets start did not")
			time.Sleep(200 * time.Millisecond) // no more start
			require.Equal(t, tc.peak, b.gate.running())
			close(b.gate.release)
			for _, id := range ids {
				rec := b.WaitState(t, id, kv.StateSucceeded)
				require.Equal(t, 1, rec.Attempt, "task %s", id)
				require.Equal(t, 1, b.gate.ran(id), "task %s", id)
			}
			require.LessOrEqual(t, b.gate.peakNow(), tc.peak)
		})
	}
}

// A rate-limited backlog larger than its consumer's parking room (10 of
// 50, MaxAckPending 20) steps aside, and still starts no more than the
// rate and its burst in any second, across two workers; every task runs
// once. A task stepped aside comes back no sooner than its rate's next
// start.
func TestRateLimitedBacklogStepsAside(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var g gauge
	var workers []*worker.Worker
	for _, id := range []string{"A", "B"} {
		reg := worker.NewRegistry()
		require.NoError(t, reg.Handle("sms", g.handler(0), nil))
		w, _ := b.StartWorker(t, worker.Config{ID: id, MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
		workers = append(workers, w)
	}
	const rate, burst = 10, 2
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"sms": {Rate: rate, Burst: burst}}})
	time.Sleep(200 * time.Millisecond)
	var specs []ax.TaskSpec
	for i := range 50 {
		specs = append(specs, ax.TaskSpec{Type: "sms", Key: "k", ID: fmt.Sprintf("sms-%d", i), Priority: ax.P2})
	}
	_, err := b.Client.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	aside := 0
	for _, s := range specs {
		rec := b.WaitState(t, s.ID, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "task %s", s.ID)
		if steppedAsideIn(rec) {
			aside++
		}
	}
	require.Positive(t, aside, "no task stepped aside")
	g.mu.Lock()
	starts := slices.Clone(g.starts)
	g.mu.Unlock()
	require.Len(t, starts, len(specs))
	slices.SortFunc(starts, time.Time.Compare)
	for i, s := range starts {
		n := 0
		for _, o := range starts[i:] {
			if o.Sub(s) < time.Second {
				n++
			}
		}
		require.LessOrEqual(t, n, rate+burst, "starts in the second from %s", s)
	}
	t.Logf("stepped aside: %d tasks (%d + %d moves); took %s", aside, workers[0].Stats().SteppedAside,
		workers[1].Stats().SteppedAside, starts[len(starts)-1].Sub(starts[0]))
}

// Bad input against a limited type whose parking room is full, so that its
// deliveries step aside: a raw publish with a forged Ax-Run-At in the past
// runs once; one with a future Ax-Run-At runs once and not before it; a
// second message of a task that waits stepped aside (a Go submit's or a
// raw publish's: a raw duplicate past the de-duplication window, or with
// another Nats-Msg-Id suffix) neither runs nor replaces the task's
// payload; nor does one of a task that waits PENDING for its run time.
func TestBadInputAgainstStepAside(t *testing.T) {
	t.Parallel()
	b := setupAside(t, true)
	ctx := context.Background()
	publish := func(msgID, payload string, runAt time.Time) {
		t.Helper()
		msg := nats.NewMsg("ax.submit.p2.default.partner.k")
		msg.Header.Set("Nats-Msg-Id", msgID)
		if !runAt.IsZero() {
			msg.Header.Set("Ax-Run-At", runAt.UTC().Format(time.RFC3339Nano))
		}
		msg.Data = []byte(payload)
		_, err := b.JS.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	submit := func(id, payload string, runAt time.Time) {
		t.Helper()
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2, Payload: []byte(payload), RunAt: runAt})
		require.NoError(t, err)
	}
	publish("past", "past", time.Now().Add(-time.Hour))
	future := time.Now().Add(3 * time.Second)
	publish("future", "future", future)
	submit("go-dup", "original", time.Time{})
	publish("raw-dup", "original", time.Time{})
	later := time.Now().Add(4 * time.Second)
	submit("later", "original", later)
	b.waitAside(t, "past")
	b.waitAside(t, "go-dup")
	b.waitAside(t, "raw-dup")
	publish("go-dup", "forged", time.Time{})
	publish("raw-dup:again", "forged", time.Time{})
	publish("later:again", "forged", time.Time{})
	time.Sleep(time.Until(later)) // the forged ones are delivered, and held back, meanwhile
	close(b.gate.release)
	for _, id := range []string{"past", "future", "go-dup", "raw-dup", "later", "blocker", "filler-1", "filler-2"} {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "task %s", id)
	}
	time.Sleep(3 * time.Second) // the forged messages' deliveries and every schedule come and go
	for id, want := range map[string]string{"past": "past", "future": "future", "go-dup": "original", "raw-dup": "original", "later": "original"} {
		require.Equal(t, 1, b.gate.ran(id), "task %s", id)
		payload, started := b.gate.execution(id)
		require.Equal(t, want, payload, "task %s", id)
		switch id {
		case "future":
			require.False(t, started.Before(future), "task %s ran before its time", id)
		case "later":
			require.False(t, started.Before(later), "task %s ran before its time", id)
		}
	}
}

// A unique task that steps aside still holds its unique key in the states
// its submitter named, READY among them: it waits for its limit as a READY
// task does, only out of its consumer. Fails if the step aside's PENDING
// counts as a delayed task's: a second submit with the key, unique while
// READY, RUNNING or RETRYING, makes a second task.
func TestUniqueTaskSteppedAsideStillHoldsItsKey(t *testing.T) {
	t.Parallel()
	b := setupAside(t, true)
	ctx := context.Background()
	spec := func(id string) ax.TaskSpec {
		return ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2, Unique: &ax.UniqueOpts{
			Key: "nightly", For: time.Hour, States: []kv.State{kv.StateReady, kv.StateRunning, kv.StateRetrying}}}
	}
	first, err := b.Client.Submit(ctx, spec("unique-1"))
	require.NoError(t, err)
	require.False(t, first.UniqueSkipped)
	b.waitAside(t, "unique-1")
	second, err := b.Client.Submit(ctx, spec("unique-2"))
	require.NoError(t, err)
	require.True(t, second.UniqueSkipped, "a second task was made while the first waited stepped aside")
	require.Equal(t, "unique-1", second.ID)
	close(b.gate.release)
	b.WaitState(t, "unique-1", kv.StateSucceeded)
	require.Equal(t, 1, b.gate.ran("unique-1"))
}

// A task that steps aside again and again, while no task of its limit
// starts on its worker, waits 1 s the first time, then twice as long each
// time, plus up to a quarter of it at random, as docs/WIRE.md says: its
// run time is that far from its step aside.
func TestStepAsideWaitDoubles(t *testing.T) {
	t.Parallel()
	b := setupAside(t, true)
	ctx := context.Background()
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: "again", Priority: ax.P2})
	require.NoError(t, err)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		var rec *kv.Record
		require.Eventually(t, func() bool {
			r, _, err := b.Store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "again"})
			if err != nil || !r.WaitsSteppedAside() {
				return false
			}
			n := 0
			for _, m := range r.Trail {
				if m.Action == worker.ActionSteppedAside {
					n++
				}
			}
			rec = r
			return n == i+1
		}, 30*time.Second, 2*time.Millisecond, "step aside %d", i+1)
		// The run time is set before the schedule's publish, the move's time
		// after it: a loaded machine's publish comes off the wait.
		wait := rec.RunAt.Sub(rec.Trail[len(rec.Trail)-1].At)
		require.GreaterOrEqual(t, wait, want-100*time.Millisecond, "step aside %d", i+1)
		require.LessOrEqual(t, wait, want+want/2+100*time.Millisecond, "step aside %d", i+1)
	}
	close(b.gate.release)
	rec := b.WaitState(t, "again", kv.StateSucceeded)
	require.Equal(t, 1, rec.Attempt)
	require.Equal(t, 1, b.gate.ran("again"))
}

// A producer that reads a task's record (the shipped service role may)
// cannot replace the payload of a task that waits stepped aside by
// publishing a message of its id, type, key and priority whose Ax-Run-At
// is the record's run time: a stepped-aside task is no delayed task, and
// no raw message of it carries that time. Fails if such a message counts
// as the task's own delayed message (its schedule, or its message once
// due): the forged payload runs instead of the task's, before or after
// the run time.
func TestForgedRunAtCannotReplaceASteppedAsideTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after time.Duration // when the forged message is published, from the run time
	}{
		{name: "before its run time"},
		{name: "once due", after: 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupAside(t, true)
			ctx := context.Background()
			_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: "victim", Priority: ax.P2, Payload: []byte("original")})
			require.NoError(t, err)
			rec := b.waitAside(t, "victim")
			if tc.after > 0 {
				// Once the leader's release would be due, it must not find the
				// task bound to the forged message: hold it off with a pause.
				_, err := b.api.Pause(ctx, admin.TaskRequest{ID: "victim"})
				require.NoError(t, err)
				time.Sleep(time.Until(rec.RunAt.Add(tc.after)))
				_, err = b.api.Resume(ctx, admin.TaskRequest{ID: "victim"})
				require.NoError(t, err)
			}
			msg := nats.NewMsg("ax.submit.p2.default.partner.k")
			msg.Header.Set("Nats-Msg-Id", "victim:forged")
			msg.Header.Set("Ax-Run-At", rec.RunAt.UTC().Format(time.RFC3339Nano))
			msg.Data = []byte("forged")
			_, err = b.JS.PublishMsg(ctx, msg)
			require.NoError(t, err)
			time.Sleep(time.Until(rec.RunAt.Add(tc.after + 500*time.Millisecond)))
			close(b.gate.release)
			b.WaitState(t, "victim", kv.StateSucceeded)
			time.Sleep(time.Second) // a second execution would start by now
			payload, _ := b.gate.execution("victim")
			require.Equal(t, "original", payload)
			require.Equal(t, 1, b.gate.ran("victim"))
		})
	}
}
