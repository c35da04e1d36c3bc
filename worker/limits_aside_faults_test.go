package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// runCounter counts each task's executions, all of them, the most
// running at once, and, from when a stretch is opened, the runs started
// and the most running at once.
type runCounter struct {
	mu        sync.Mutex
	runs      map[string]int
	now, peak int
	total     int
	open      bool
	stretch   runStretch
	hold      time.Duration
}

// runStretch is what a [runCounter] saw since its stretch opened.
type runStretch struct {
	peak int // the most running at once (those running at the opening included)
	runs int // the runs started
}

func newRunCounter(hold time.Duration) *runCounter {
	return &runCounter{runs: map[string]int{}, hold: hold}
}

func (c *runCounter) handler(ctx context.Context, task *worker.Task) error {
	c.mu.Lock()
	c.runs[task.ID]++
	c.total++
	c.now++
	c.peak = max(c.peak, c.now)
	if c.open {
		c.stretch.peak = max(c.stretch.peak, c.now)
		c.stretch.runs++
	}
	c.mu.Unlock()
	select {
	case <-time.After(c.hold):
	case <-ctx.Done():
	}
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	return nil
}

func (c *runCounter) peakNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

func (c *runCounter) ran(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// running returns the executions running now.
func (c *runCounter) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// started returns the executions started so far.
func (c *runCounter) started() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// openStretch opens the stretch: the handlers running now count in it.
func (c *runCounter) openStretch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open, c.stretch = true, runStretch{peak: c.now}
}

// sinceOpened returns what the counter saw since its stretch opened.
func (c *runCounter) sinceOpened() runStretch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stretch
}

// stepAsideByHand does what a worker's step aside does to task id, READY
// on its message, up to a point: it writes the schedule of the message to
// AX_DELAYED, due after wait, and, if cas, moves the record to PENDING,
// unbound. The message itself is left in its bucket, unacked: the state a
// worker stopped after the schedule leaves (cas false), or one whose
// compare-and-set landed with its reply lost, or whose ack was lost (cas
// true). It returns the run time.
func stepAsideByHand(t *testing.T, b *testBundle, id string, wait time.Duration, cas bool) time.Time {
	t.Helper()
	ctx := context.Background()
	ref := kv.Ref{Tenant: ax.DefaultTenant, ID: id}
	rec, rev, err := b.Store.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, rec.State)
	stream, err := b.JS.Stream(ctx, rec.Stream)
	require.NoError(t, err)
	msg, err := stream.GetMsg(ctx, rec.StreamSeq)
	require.NoError(t, err)
	names := streams.Names{}
	runAt := time.Now().Add(wait).UTC()
	submit := nats.NewMsg(names.SubmitSubject(rec.Priority, rec.Tenant, rec.Type, rec.Key))
	submit.Data = msg.Data
	submit.Header = streams.KeptHeaders(msg.Header)
	submit.Header.Set(streams.HeaderRunAt, runAt.Format(time.RFC3339Nano))
	_, err = b.JS.PublishMsg(ctx, names.DelayedMsg(rec.Tenant, id, submit, runAt.Add(-streams.DefaultScheduleEarly)))
	require.NoError(t, err)
	if cas {
		_, _, err = b.Store.Apply(ctx, rec, rev, kv.StatePending, kv.Actor{Worker: "gone", Action: worker.ActionSteppedAside}, func(r *kv.Record) error {
			r.RunAt = &runAt
			r.Bind(r.Gen, "", 0)
			return nil
		})
		require.NoError(t, err)
	}
	return runAt
}

// Each point a step aside can stop at leaves a task that runs exactly
// once, as docs/ARCHITECTURE.md ("Stepping aside") says: stopped after
// its schedule was written (the task READY on its message, a schedule the
// leader drops), and with its compare-and-set landed but its reply or its
// ack lost (the task PENDING with its schedule, its message still in its
// bucket and delivered again: dropped as stale, kept and dropped, or bound
// if it is itself a released copy). Its message is a Go submit's, a raw
// publish's or a released copy.
func TestStepAsideStoppedHalfwayRunsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		message string // "go", "raw", "copy"
		cas     bool
	}{
		{name: "after the schedule, a Go submit", message: "go"},
		{name: "after the schedule, a raw publish", message: "raw"},
		{name: "after the schedule, a released copy", message: "copy"},
		{name: "reply lost, a Go submit", message: "go", cas: true},
		{name: "reply lost, a raw publish", message: "raw", cas: true},
		{name: "reply lost, a released copy", message: "copy", cas: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.StartLeader(t, scheduler.Config{})
			ctx := context.Background()
			const id = "halfway"
			switch tc.message {
			case "go":
				_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2})
				require.NoError(t, err)
			case "raw":
				// A raw publish whose first sight wrote its READY record, as a
				// step aside does.
				msg := nats.NewMsg("ax.submit.p2.default.partner.k")
				msg.Header.Set("Nats-Msg-Id", id)
				ack, err := b.JS.PublishMsg(ctx, msg)
				require.NoError(t, err)
				rec := &kv.Record{ID: id, Type: "partner", Tenant: ax.DefaultTenant, Key: "k", Priority: 2, State: kv.StateReady}
				rec.Bind(0, ack.Stream, ack.Sequence)
				_, _, err = b.Store.Create(ctx, rec, kv.Actor{Worker: "gone", Action: "publish"})
				require.NoError(t, err)
			case "copy":
				_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2, RunAt: time.Now().Add(200 * time.Millisecond)})
				require.NoError(t, err)
				rec := b.WaitState(t, id, kv.StateReady) // released: bound to its copy
				require.Greater(t, rec.Gen, uint64(1))
			}
			runAt := stepAsideByHand(t, b, id, 2*time.Second, tc.cas)
			runs := newRunCounter(0)
			reg := worker.NewRegistry()
			require.NoError(t, reg.Handle("partner", runs.handler, nil))
			b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg})
			b.WaitState(t, id, kv.StateSucceeded)
			time.Sleep(time.Until(runAt.Add(2 * time.Second))) // the schedule fired, and its release was tried
			require.Equal(t, 1, runs.ran(id))
			rec := b.WaitState(t, id, kv.StateSucceeded)
			require.Equal(t, 1, rec.Attempt)
			t.Logf("trail: %v", axtest.Moves(rec))
		})
	}
}

// The leader away: tasks that stepped aside wait in AX_DELAYED past their
// run time, nothing releases them, and nothing else runs them; once a
// leader starts, each runs once.
func TestSteppedAsideWaitForTheLeader(t *testing.T) {
	t.Parallel()
	b := setupAside(t, false)
	ctx := context.Background()
	var ids []string
	var last time.Time
	for i := range 3 {
		id := fmt.Sprintf("waiting-%d", i)
		ids = append(ids, id)
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	for _, id := range ids {
		last = later(last, *b.waitAside(t, id).RunAt)
	}
	close(b.gate.release) // the slot is free: only a release stands between them and a start
	b.WaitState(t, "blocker", kv.StateSucceeded)
	time.Sleep(time.Until(last.Add(2 * time.Second)))
	for _, id := range ids {
		rec := b.WaitState(t, id, kv.StatePending)
		require.Zero(t, b.gate.ran(id), "task %s ran without a leader", id)
		require.Equal(t, worker.ActionSteppedAside, rec.Trail[len(rec.Trail)-1].Action)
	}
	b.StartLeader(t, scheduler.Config{})
	for _, id := range append(ids, "filler-1", "filler-2") {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "task %s", id)
		require.Equal(t, 1, b.gate.ran(id), "task %s", id)
	}
}

// A limited backlog stepping aside survives the loss of its worker: stopped
// (w.Stop) or cut off (its connection closed) while it steps tasks aside,
// or sharing the backlog with another worker. Every task runs once (a task
// claimed on the worker cut off may run again, a lost attempt its record
// counts), never two at a time.
func TestSteppedAsideBacklogSurvivesWorkerLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		loss string // "stop", "close" or "" (two workers from the start)
	}{
		{name: "stopped", loss: "stop"},
		{name: "connection closed", loss: "close"},
		{name: "two workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &streams.Config{MaxAckPending: 20, AckWait: 2 * time.Second})
			b.StartLeader(t, scheduler.Config{})
			ctx := context.Background()
			runs := newRunCounter(20 * time.Millisecond)
			reg := worker.NewRegistry()
			require.NoError(t, reg.Handle("partner", runs.handler, nil))
			setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})
			a, nc := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
			if tc.loss == "" {
				b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
			}
			time.Sleep(200 * time.Millisecond) // the watch delivers the limits
			var specs []ax.TaskSpec
			for i := range 60 {
				specs = append(specs, ax.TaskSpec{Type: "partner", Key: "k", ID: fmt.Sprintf("task-%d", i), Priority: ax.P2})
			}
			_, err := b.Client.SubmitBatch(ctx, specs)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return a.Stats().SteppedAside >= 5 }, 20*time.Second, time.Millisecond)
			switch tc.loss {
			case "stop":
				require.NoError(t, a.Stop(ctx))
			case "close":
				nc.Close()
			}
			if tc.loss != "" {
				b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
			}
			aside := 0
			for _, s := range specs {
				rec := b.WaitState(t, s.ID, kv.StateSucceeded)
				// A lost attempt (claimed on the worker cut off) may or may
				// not have reached its handler.
				n := runs.ran(s.ID)
				require.True(t, n >= 1 && n <= 1+rec.Lost, "task %s ran %d times (trail %v)", s.ID, n, axtest.Moves(rec))
				if steppedAsideIn(rec) {
					aside++
				}
			}
			require.Positive(t, aside)
			require.Equal(t, 1, runs.peakNow())
		})
	}
}
