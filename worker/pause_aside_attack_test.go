package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// execCounter counts the executions of each task id in its handler.
type execCounter struct {
	mu   sync.Mutex
	runs map[string]int
	all  atomic.Int64
}

func (c *execCounter) handler(fail *atomic.Bool) worker.HandlerFunc {
	return func(_ context.Context, task *worker.Task) error {
		c.mu.Lock()
		if c.runs == nil {
			c.runs = map[string]int{}
		}
		c.runs[task.ID]++
		c.mu.Unlock()
		c.all.Add(1)
		if fail != nil && fail.Load() {
			return errors.New("downstream unavailable")
		}
		return nil
	}
}

func (c *execCounter) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// waitPausedAside waits until every task of ids waits paused aside.
func (b *testBundle) waitPausedAside(t *testing.T, ids []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec, err := axtest.Record(context.Background(), b.Store, id); err != nil || !rec.WaitsPausedAside() {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the paused backlog did not all step aside")
}

// A pause that ends and starts again before the resumer's settle: the
// tasks paused aside stay aside (the resumer reads the pauses as they are
// when it looks), none runs while paused, and at the final resume each
// runs once.
func TestPauseFlapKeepsTasksAside(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	ids := pauseBacklog(t, b, 30)
	b.waitPausedAside(t, ids)

	paused := kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}}
	for range 3 {
		setLimits(t, b.JS, kv.Limits{})
		time.Sleep(300 * time.Millisecond)
		setLimits(t, b.JS, paused)
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(4 * time.Second) // past the resumer's settle
	require.Zero(t, reports.all.Load(), "a paused task ran")
	for _, id := range ids {
		rec, err := axtest.Record(context.Background(), b.Store, id)
		require.NoError(t, err)
		require.True(t, rec.WaitsPausedAside(), "%s released while paused: %s", id, axtest.Moves(rec))
	}

	resumed := time.Now()
	setLimits(t, b.JS, kv.Limits{})
	for _, id := range ids {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	require.Less(t, time.Since(resumed), 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	for _, id := range ids {
		require.Equal(t, 1, reports.of(id), id)
	}
}

// A task held by a pause of its tenant and of its type stays aside when
// only its type is resumed; the type's tasks of other tenants run.
func TestTypeResumeKeepsTenantPausedTasksAside(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}, "tenant:acme": {At: time.Now()}}})
	time.Sleep(200 * time.Millisecond)
	var acme, others []string
	for i := range 20 {
		tenant, id := "default", fmt.Sprintf("report-%d", i)
		if i%2 == 0 {
			tenant, id = "acme", fmt.Sprintf("acme-%d", i)
			acme = append(acme, id)
		} else {
			others = append(others, id)
		}
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Tenant: tenant, Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	b.waitPausedAside(t, append(acme, others...))

	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"tenant:acme": {At: time.Now()}}})
	for _, id := range others {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	time.Sleep(time.Second)
	for _, id := range acme {
		require.Zero(t, reports.of(id), "%s ran while its tenant is paused", id)
		rec, err := axtest.Record(ctx, b.Store, id)
		require.NoError(t, err)
		require.True(t, rec.WaitsPausedAside(), "%s released while its tenant is paused: %s", id, axtest.Moves(rec))
	}
	setLimits(t, b.JS, kv.Limits{})
	for _, id := range acme {
		b.WaitState(t, id, kv.StateSucceeded)
	}
}

// A delayed task of a paused type is not released before its run time by
// the resume that releases its type's tasks paused aside.
func TestResumeDoesNotReleaseDelayedTaskEarly(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	ids := pauseBacklog(t, b, 10)
	runAt := time.Now().Add(12 * time.Second)
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: "later", RunAt: runAt})
	require.NoError(t, err)
	b.waitPausedAside(t, ids)

	setLimits(t, b.JS, kv.Limits{})
	for _, id := range ids {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	rec, err := axtest.Record(ctx, b.Store, "later")
	require.NoError(t, err)
	require.Equal(t, kv.StatePending, rec.State, "released early: %s", axtest.Moves(rec))
	require.Zero(t, reports.of("later"))
	rec = b.WaitState(t, "later", kv.StateSucceeded)
	require.False(t, rec.StartedAt.Before(runAt), "started %s, due %s", rec.StartedAt, runAt)
}

// A paused type's retrying backlog (the pause an operator makes when its
// downstream is down) does not hold its shard consumer's ack pending: its
// retries step aside like its READY tasks, and run once the pause ends.
// Without it, each retry is naked again and again, and with the pending
// full the other type's tasks of the shard are never delivered.
func TestPausedRetryingBacklogLeavesItsShardFree(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports, emails execCounter
	var down atomic.Bool
	down.Store(true)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(&down), &worker.TypeConfig{MaxAttempts: 100,
		Backoff: worker.Backoff{Base: 200 * time.Millisecond, Cap: 400 * time.Millisecond}}))
	require.NoError(t, reg.Handle("email", emails.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("report-%d", i)
		ids = append(ids, id)
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	for _, id := range ids {
		require.Eventually(t, func() bool { return reports.of(id) > 0 }, 30*time.Second, 20*time.Millisecond)
	}
	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}})
	time.Sleep(time.Second) // an attempt that started before the pause ends
	ranPaused := reports.all.Load()

	for i := range 10 {
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Key: "k", ID: fmt.Sprintf("email-%d", i), Priority: ax.P2})
		require.NoError(t, err)
	}
	for i := range 10 {
		b.WaitState(t, fmt.Sprintf("email-%d", i), kv.StateSucceeded)
	}
	require.Equal(t, ranPaused, reports.all.Load(), "a paused task ran")

	down.Store(false)
	setLimits(t, b.JS, kv.Limits{})
	for _, id := range ids {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, reports.of(id), rec.Attempt, "%s: %s", id, axtest.Moves(rec))
	}
}

// A task paused aside that an operator paused and resumes after its
// type's resume runs soon, not at its own wait (a minute or more): the
// resumer's release passed it by while it was PAUSED.
func TestTaskResumedAfterItsTypeResumeRunsSoon(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	ids := pauseBacklog(t, b, 4)
	b.waitPausedAside(t, ids)
	api := b.StartAdmin(t, nil)
	held := ids[1]
	_, err := api.Pause(ctx, admin.TaskRequest{ID: held})
	require.NoError(t, err)

	setLimits(t, b.JS, kv.Limits{})
	for _, id := range ids {
		if id != held {
			b.WaitState(t, id, kv.StateSucceeded)
		}
	}
	time.Sleep(3 * time.Second) // past the resumer's release
	require.Zero(t, reports.of(held))
	resumed := time.Now()
	_, err = api.Resume(ctx, admin.TaskRequest{ID: held})
	require.NoError(t, err)
	rec := b.WaitState(t, held, kv.StateSucceeded)
	require.Equal(t, 1, reports.of(held))
	t.Logf("ran %s after its resume: %s", time.Since(resumed).Round(time.Millisecond), axtest.Moves(rec))
}

// A pause made again while the resumer's sweep still releases the tasks
// of the pause that ended stops that release: the sweep checks each task
// against the pauses as they are when it releases it. Without it, the
// sweep read the pauses once, when it began, and released the whole
// backlog into a paused type, each task to be delivered three times and
// moved aside again.
func TestRepauseStopsTheResumersSweep(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.StartLeader(t, scheduler.Config{MoverWorkers: 1}) // a slow sweep
	ctx := context.Background()
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	paused := kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}}
	setLimits(t, b.JS, paused)
	time.Sleep(200 * time.Millisecond)
	const n = 600
	var specs []ax.TaskSpec
	for i := range n {
		specs = append(specs, ax.TaskSpec{Type: "report", ID: fmt.Sprintf("report-%d", i), Key: fmt.Sprintf("k%d", i%16)})
	}
	_, err := b.Client.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.Stats().SteppedAside >= n }, 60*time.Second, 50*time.Millisecond)

	setLimits(t, b.JS, kv.Limits{})
	require.Eventually(t, func() bool { return reports.all.Load() > 0 }, 30*time.Second, time.Millisecond)
	setLimits(t, b.JS, paused)
	repaused := time.Now().Add(100 * time.Millisecond) // a release under way may land
	time.Sleep(5 * time.Second)
	late := 0
	for _, spec := range specs {
		rec, err := axtest.Record(ctx, b.Store, spec.ID)
		require.NoError(t, err)
		for _, m := range rec.Trail {
			if m.From == kv.StatePending && m.To == kv.StateReady && m.At.After(repaused) {
				late++
			}
		}
	}
	ran := reports.all.Load()
	t.Logf("released before the pause came back: %d; after: %d", ran, late)
	require.Less(t, late, n/10, "the sweep released a paused type's tasks")

	setLimits(t, b.JS, kv.Limits{})
	for _, spec := range specs {
		b.WaitState(t, spec.ID, kv.StateSucceeded)
	}
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, int64(n), reports.all.Load())
}

// A delayed task that comes due while its type is paused is paused aside
// like the others, and runs once, soon after the resume.
func TestDelayedTaskDueWhilePausedRunsAtTheResume(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}})
	time.Sleep(200 * time.Millisecond)
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", ID: "later", Delay: 1500 * time.Millisecond})
	require.NoError(t, err)
	b.waitPausedAside(t, []string{"later"})
	require.Zero(t, reports.of("later"))

	resumed := time.Now()
	setLimits(t, b.JS, kv.Limits{})
	rec := b.WaitState(t, "later", kv.StateSucceeded)
	require.Less(t, time.Since(resumed), 15*time.Second)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 1, reports.of("later"), axtest.Moves(rec))
}

// `ax tasks cancel --type T --state PENDING` cancels a paused type's
// tasks paused aside, with their schedules: none runs at the resume.
func TestCancelPendingOfPausedTypeCancelsTasksPausedAside(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	ids := pauseBacklog(t, b, 24)
	b.waitPausedAside(t, ids)
	api := b.StartAdmin(t, nil)
	reply, err := api.CancelMatching(ctx, admin.BatchCancelRequest{Filter: admin.Filter{Type: "report", States: []kv.State{kv.StatePending}}})
	require.NoError(t, err)
	require.Equal(t, len(ids), reply.Cancelled, "%+v", reply)
	delayed, err := b.JS.Stream(ctx, streams.Names{}.DelayedStream())
	require.NoError(t, err)
	info, err := delayed.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "schedules of cancelled tasks left")

	setLimits(t, b.JS, kv.Limits{})
	time.Sleep(4 * time.Second) // past the resumer's release
	require.Zero(t, reports.all.Load())
	for _, id := range ids {
		rec, err := axtest.Record(ctx, b.Store, id)
		require.NoError(t, err)
		require.Equal(t, kv.StateCancelled, rec.State)
	}
}

// delayedOutage is a JetStream whose AX_DELAYED cannot be bound until
// healed: what a leader elected while that stream elects its own leader
// meets.
type delayedOutage struct {
	jetstream.JetStream
	healed atomic.Bool
}

func (o *delayedOutage) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == (streams.Names{}).DelayedStream() && !o.healed.Load() {
		return nil, jetstream.ErrStreamNotFound
	}
	return o.JetStream.Stream(ctx, name)
}

// A leader whose release at its election fails (AX_DELAYED unavailable a
// moment) tries again soon: the tasks of a pause that ended while no
// leader ran do not wait out their own time (a minute or more).
func TestResumersFailedSweepIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	var reports execCounter
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(nil), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	ids := pauseBacklog(t, b, 10)
	b.waitPausedAside(t, ids)
	setLimits(t, b.JS, kv.Limits{})

	_, js := b.Server.Connect()
	outage := &delayedOutage{JetStream: js}
	l, err := scheduler.New(context.Background(), outage, &scheduler.Config{LeaseTTL: 2 * time.Second, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(3 * time.Second) // elected, its first release failed
	outage.healed.Store(true)
	healed := time.Now()
	for _, id := range ids {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	require.Less(t, time.Since(healed), 20*time.Second)
}

// A unique task whose retry was paused aside still holds its key for a
// submit that names RETRYING, not READY, among its states: it waits aside
// as the retry it was (before, it read as READY and a second task was
// made).
func TestUniqueRetryPausedAsideStillHoldsItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	var down atomic.Bool
	down.Store(true)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(&down), &worker.TypeConfig{MaxAttempts: 100,
		Backoff: worker.Backoff{Base: 200 * time.Millisecond, Cap: 400 * time.Millisecond}}))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 4})
	spec := func(id string) ax.TaskSpec {
		return ax.TaskSpec{Type: "report", Key: "k", ID: id, Priority: ax.P2, Unique: &ax.UniqueOpts{
			Key: "nightly", For: time.Hour, States: []kv.State{kv.StateRunning, kv.StateRetrying}}}
	}
	first, err := b.Client.Submit(ctx, spec("unique-1"))
	require.NoError(t, err)
	require.False(t, first.UniqueSkipped)
	require.Eventually(t, func() bool { return reports.of("unique-1") > 0 }, 30*time.Second, 10*time.Millisecond)
	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}})
	require.Eventually(t, func() bool {
		rec, err := axtest.Record(ctx, b.Store, "unique-1")
		return err == nil && rec.WaitsPausedAside()
	}, 30*time.Second, 20*time.Millisecond, "the retry was not paused aside")
	rec, err := axtest.Record(ctx, b.Store, "unique-1")
	require.NoError(t, err)
	require.Equal(t, kv.StateRetrying, rec.WaitsAsideFrom())

	second, err := b.Client.Submit(ctx, spec("unique-2"))
	require.NoError(t, err)
	require.True(t, second.UniqueSkipped, "a second task was made while the first's retry waited paused aside")
	require.Equal(t, "unique-1", second.ID)

	down.Store(false)
	setLimits(t, b.JS, kv.Limits{})
	b.WaitState(t, "unique-1", kv.StateSucceeded)
	_, err = axtest.Record(ctx, b.Store, "unique-2")
	require.Error(t, err, "the skipped submit made a task")
}

// A retry held back by a full concurrency limit, with no room to park it,
// steps aside too (RETRYING -> PENDING) rather than being naked in its
// shard consumer's ack pending until a slot frees, and comes back READY
// with its attempts kept: each task's attempts are its handler's runs.
func TestLimitedRetriesStepAside(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports execCounter
	var down atomic.Bool
	down.Store(true)
	reg := worker.NewRegistry()
	run := reports.handler(&down)
	slow := func(ctx context.Context, task *worker.Task) error {
		time.Sleep(20 * time.Millisecond) // 30 tasks at a limit of 1 take longer than a backoff
		return run(ctx, task)
	}
	require.NoError(t, reg.Handle("report", slow, &worker.TypeConfig{MaxAttempts: 100,
		Backoff: worker.Backoff{Base: 100 * time.Millisecond, Cap: 200 * time.Millisecond}}))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"report": {Concurrency: 1}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("report-%d", i)
		ids = append(ids, id)
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	retriedAside := func() bool {
		for _, id := range ids {
			if rec, err := axtest.Record(ctx, b.Store, id); err == nil && rec.WaitsAsideFrom() == kv.StateRetrying {
				return true
			}
		}
		return false
	}
	require.Eventually(t, retriedAside, 30*time.Second, 20*time.Millisecond, "no retry stepped aside")
	down.Store(false)
	for _, id := range ids {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, reports.of(id), rec.Attempt, "%s: %s", id, axtest.Moves(rec))
	}
}
