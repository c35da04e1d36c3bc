package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// runLog keeps the start and end of each run of each task id, in its
// handler.
type runLog struct {
	mu   sync.Mutex
	runs map[string][][2]time.Time
}

// handler runs for hold and fails.
func (l *runLog) handler(hold time.Duration) worker.HandlerFunc {
	return func(ctx context.Context, task *worker.Task) error {
		start := time.Now()
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.runs == nil {
			l.runs = map[string][][2]time.Time{}
		}
		l.runs[task.ID] = append(l.runs[task.ID], [2]time.Time{start, time.Now()})
		return errors.New("downstream unavailable")
	}
}

func (l *runLog) of(id string) [][2]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs[id])
}

// steppedAsideRetry reports whether rec's trail shows a retry stepped
// aside for a limit.
func steppedAsideRetry(rec *kv.Record) bool {
	return slices.ContainsFunc(rec.Trail, func(m kv.Move) bool {
		return m.From == kv.StateRetrying && m.To == kv.StatePending && m.Action == worker.ActionSteppedAside
	})
}

// Retries held back by a full concurrency or rate limit step aside and
// come back, yet each task runs exactly its MaxAttempts (counted in the
// handler), never a retry before its backoff has passed, never faster
// than its rate, and goes DEAD with its dead letter once its attempts
// are spent.
func TestLimitedRetriesKeepAttemptsAndBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit kv.Limit
	}{
		{"concurrency", kv.Limit{Concurrency: 1}},
		{"rate", kv.Limit{Rate: 40, Burst: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &streams.Config{MaxAckPending: 20})
			b.StartLeader(t, scheduler.Config{})
			ctx := context.Background()
			var log runLog
			backoff := worker.Backoff{Base: 150 * time.Millisecond, Cap: 300 * time.Millisecond}
			reg := worker.NewRegistry()
			require.NoError(t, reg.Handle("report", log.handler(20*time.Millisecond), &worker.TypeConfig{MaxAttempts: 3, Backoff: backoff}))
			b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
			setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"report": tc.limit}})
			time.Sleep(200 * time.Millisecond) // the watch delivers the change
			var ids []string
			for i := range 60 {
				id := fmt.Sprintf("report-%d", i)
				ids = append(ids, id)
				_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: id, Priority: ax.P2})
				require.NoError(t, err)
			}
			aside := 0
			var starts []time.Time
			for _, id := range ids {
				rec := axtest.WaitState(t, axtest.StoreRead(b.Store), id, 60*time.Second, kv.StateDead)
				runs := log.of(id)
				require.Len(t, runs, 3, "%s: %s", id, axtest.Moves(rec))
				require.Equal(t, 3, rec.Attempt, "%s: %s", id, axtest.Moves(rec))
				require.NotZero(t, rec.DLQSeq, "%s has no dead letter", id)
				for i := 1; i < len(runs); i++ {
					least := min(backoff.Base<<(i-1), backoff.Cap)
					gap := runs[i][0].Sub(runs[i-1][1])
					require.GreaterOrEqual(t, gap, least-10*time.Millisecond, "%s: attempt %d ran %s after attempt %d (backoff %s): %s", id, i+1, gap, i, least, axtest.Moves(rec))
				}
				for _, run := range runs {
					starts = append(starts, run[0])
				}
				if steppedAsideRetry(rec) {
					aside++
				}
			}
			require.NotZero(t, aside, "no retry stepped aside")
			if tc.limit.Rate > 0 {
				slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
				for i := range starts {
					for j := i + 1; j < len(starts); j++ {
						allowed := float64(tc.limit.Burst) + tc.limit.Rate*starts[j].Sub(starts[i]).Seconds() + 1
						require.LessOrEqual(t, float64(j-i+1), allowed, "%d starts in %s", j-i+1, starts[j].Sub(starts[i]))
					}
				}
			}
			dlq, err := b.JS.Stream(ctx, streams.Names{}.DLQStream())
			require.NoError(t, err)
			info, err := dlq.Info(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(len(ids)), info.State.Msgs)
		})
	}
}

// headerLog keeps, in its handler, the headers and start of each task's
// run.
type headerLog struct {
	mu   sync.Mutex
	runs map[string][]nats.Header
	at   map[string]time.Time
}

func (l *headerLog) handler(_ context.Context, task *worker.Task) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs, l.at = map[string][]nats.Header{}, map[string]time.Time{}
	}
	l.runs[task.ID] = append(l.runs[task.ID], task.Headers)
	l.at[task.ID] = time.Now()
	return nil
}

func (l *headerLog) of(id string) ([]nats.Header, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs[id]), l.at[id]
}

// The mark of a schedule paused aside (Ax-Aside) stays on the schedule:
// the copy the leader releases at the resume does not carry it. A
// producer's raw delayed message that forges it does not pass it on to
// its schedule, so the resume's look does not release it early, and the
// task runs once, at its run time.
func TestAsideMarkStaysOnItsSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var log headerLog
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", log.handler, nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: "aside", Priority: ax.P2})
	require.NoError(t, err)
	runAt := time.Now().Add(6 * time.Second)
	forged := nats.NewMsg("ax.submit.p2.default.report.k")
	forged.Header.Set("Nats-Msg-Id", "forged")
	forged.Header.Set(streams.HeaderRunAt, runAt.UTC().Format(time.RFC3339Nano))
	forged.Header.Set(streams.HeaderAside, streams.AsidePaused)
	_, err = b.JS.PublishMsg(ctx, forged)
	require.NoError(t, err)
	b.waitPausedAside(t, []string{"aside"})
	b.WaitState(t, "forged", kv.StatePending)

	names := streams.Names{}
	delayed, err := b.JS.Stream(ctx, names.DelayedStream())
	require.NoError(t, err)
	schedule, err := delayed.GetLastMsgForSubject(ctx, names.DelayedSubject("default", "aside"))
	require.NoError(t, err)
	require.Equal(t, streams.AsidePaused, schedule.Header.Get(streams.HeaderAside), "the schedule paused aside is not marked")
	schedule, err = delayed.GetLastMsgForSubject(ctx, names.DelayedSubject("default", "forged"))
	require.NoError(t, err)
	require.Empty(t, schedule.Header.Values(streams.HeaderAside), "the forged mark reached the schedule")

	setLimits(t, b.JS, kv.Limits{})
	b.WaitState(t, "aside", kv.StateSucceeded)
	runs, _ := log.of("aside")
	require.Len(t, runs, 1)
	require.Empty(t, runs[0].Values(streams.HeaderAside), "the released copy carries the mark")
	require.NotEmpty(t, runs[0].Get(streams.HeaderReleasedAt), "not a released copy")

	b.WaitState(t, "forged", kv.StateSucceeded)
	runs, at := log.of("forged")
	require.Len(t, runs, 1)
	// A run time is a wall-clock time, and the leader waits for it by its
	// wall clock: compare wall clocks (Round(0) drops the monotonic
	// reading), which the machine may step meanwhile (run 14 ms "early"
	// by the monotonic clock once, under load).
	at, runAt = at.Round(0), runAt.Round(0)
	require.False(t, at.Before(runAt), "the forged task ran %s before its run time", runAt.Sub(at))
	require.Empty(t, runs[0].Values(streams.HeaderAside), "the released copy carries the forged mark")
}

// A retry whose deadline passes while it waits stepped aside for a limit
// does not run again once released: it goes DEAD for its deadline.
func TestLimitedRetryPastItsDeadlineRunsNoMore(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var log runLog
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", log.handler(20*time.Millisecond), &worker.TypeConfig{MaxAttempts: 100,
		Backoff: worker.Backoff{Base: 100 * time.Millisecond, Cap: 200 * time.Millisecond}}))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"report": {Concurrency: 1}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change
	// 60 submits took more than 2 s on a loaded machine, past the deadline.
	deadline := time.Now().Add(5 * time.Second)
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("report-%d", i)
		ids = append(ids, id)
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: id, Priority: ax.P2, Deadline: deadline})
		require.NoError(t, err)
	}
	aside := 0
	for _, id := range ids {
		rec := axtest.WaitState(t, axtest.StoreRead(b.Store), id, 60*time.Second, kv.StateDead)
		require.Contains(t, rec.LastError, worker.ErrDeadlinePassed.Error(), "%s: %s", id, axtest.Moves(rec))
		for _, run := range log.of(id) {
			require.False(t, run[0].After(deadline), "%s ran past its deadline: %s", id, axtest.Moves(rec))
		}
		if steppedAsideRetry(rec) {
			aside++
		}
	}
	require.NotZero(t, aside, "no retry stepped aside")
}
