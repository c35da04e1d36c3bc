package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireNoHolders waits until AX_LIMITS holds no slot of any of targets.
// The workers' member TTL must be long, so that a slot left held, renewed
// or not, does not expire meanwhile.
func requireNoHolders(t *testing.T, b *testBundle, targets ...string) {
	t.Helper()
	ctx := context.Background()
	use, err := kv.NewLimitUse(ctx, b.JS, streams.Names{})
	require.NoError(t, err)
	for _, target := range targets {
		var n int
		require.Eventually(t, func() bool {
			n, err = use.InUse(ctx, target)
			return err == nil && n == 0
		}, 10*time.Second, 20*time.Millisecond, "slots of %s left held: %d (%v)", target, n, err)
	}
}

// The limits changed ten times while a backlog parked behind a
// concurrency limit of 2 drains on two workers: every change hands each
// parked delivery back to take its group's turn, not woken, and the first
// of each limit asks AX_LIMITS for the rest (unparkAll). The limit is
// raised, lowered, removed for a moment, and other types are limited,
// paused and resumed beside it. Every task succeeds with one run (counted
// by the handler), none is lost or left parked, no slot stays held, and
// the handlers never run more than the largest limit set (5) before it
// is removed, nor more than 2 at once once it settles at 2. Fails if
// unparkAll drops the deliveries (the backlog never drains) or if the
// deliveries it hands back skip the limits.
func TestLimitsChurnWhileParkedBacklogDrains(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: time.Minute}) // no redelivery hides a lost delivery
	ctx := context.Background()
	limit := func(partner int, email kv.Limit, pauseEmail bool) kv.Limits {
		l := kv.Limits{Limits: map[string]kv.Limit{}}
		if partner > 0 {
			l.Limits["partner"] = kv.Limit{Concurrency: partner}
		}
		if email != (kv.Limit{}) {
			l.Limits["email"] = email
		}
		if pauseEmail {
			l.Paused = map[string]kv.Pause{"email": {At: time.Now()}}
		}
		return l
	}
	setLimits(t, b.JS, limit(2, kv.Limit{}, false))
	partner, email := newRunCounter(10*time.Millisecond), newRunCounter(10*time.Millisecond)
	var workers []*worker.Worker
	for _, id := range []string{"A", "B"} {
		reg := worker.NewRegistry()
		require.NoError(t, reg.Handle("partner", partner.handler, nil))
		require.NoError(t, reg.Handle("email", email.handler, nil))
		w, _ := b.StartWorker(t, worker.Config{ID: id, MemberTTL: 30 * time.Second, Registry: reg, Concurrency: 16})
		workers = append(workers, w)
	}
	// Enough that a second or so of backlog is left once the limit settles.
	const partners, emails = 400, 20
	var specs []ax.TaskSpec
	for i := range partners {
		specs = append(specs, ax.TaskSpec{Type: "partner", Key: fmt.Sprintf("p%d", i), ID: fmt.Sprintf("partner-%d", i)})
	}
	for i := range emails {
		specs = append(specs, ax.TaskSpec{Type: "email", Key: fmt.Sprintf("e%d", i), ID: fmt.Sprintf("email-%d", i)})
	}
	_, err := b.Client.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var parked int64
		for _, w := range workers {
			parked += w.Stats().Limited
		}
		return parked >= partners/2
	}, 30*time.Second, 5*time.Millisecond, "the backlog never parked")

	changes := []struct {
		limits kv.Limits
		hold   time.Duration // before the next change
	}{
		{limit(5, kv.Limit{}, false), 100 * time.Millisecond},
		{limit(1, kv.Limit{}, false), 100 * time.Millisecond},
		{limit(1, kv.Limit{Concurrency: 3}, false), 100 * time.Millisecond}, // an unrelated limit
		{limit(2, kv.Limit{Concurrency: 3}, true), 100 * time.Millisecond},  // the other type paused
		{limit(5, kv.Limit{Concurrency: 3}, false), 100 * time.Millisecond}, // and resumed
		// The limit removed for a moment: the whole parked backlog may
		// start, 32 at a time, and leave nothing to check after.
		{limit(0, kv.Limit{Concurrency: 3}, false), 20 * time.Millisecond},
		{limit(2, kv.Limit{Concurrency: 3}, false), 100 * time.Millisecond},
		{limit(1, kv.Limit{Rate: 50}, true), 100 * time.Millisecond},
		{limit(5, kv.Limit{}, false), 100 * time.Millisecond},
		{limit(2, kv.Limit{}, false), 0}, // settled
	}
	peakLimited := -1 // the peak before the limit is first removed: at most 5 throughout
	for i, c := range changes {
		if _, ok := c.limits.Limits["partner"]; !ok && peakLimited < 0 {
			peakLimited = partner.peakNow()
		}
		setLimits(t, b.JS, c.limits)
		t.Logf("change %d: %d partner runs so far", i, partner.started())
		time.Sleep(c.hold)
	}
	time.Sleep(200 * time.Millisecond) // the watch delivers the last change; the tasks started before it end
	partner.openStretch()
	opened := time.Now()
	drained := assert.Eventually(t, func() bool {
		return partner.started() >= partners && email.started() >= emails
	}, 45*time.Second, 10*time.Millisecond)
	total, settled := partner.started(), partner.sinceOpened()
	t.Logf("partner runs %d (running %d), peak %d; after settling at 2: %d runs over %s, peak %d",
		total, partner.running(), partner.peakNow(), settled.runs, time.Since(opened).Round(time.Millisecond), settled.peak)
	require.True(t, drained, "tasks lost or left parked: %d of %d partner runs", total, partners)
	for _, s := range specs {
		rec := b.WaitState(t, s.ID, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "task %s", s.ID)
	}
	for _, s := range specs {
		g := partner
		if s.Type == "email" {
			g = email
		}
		require.Equal(t, 1, g.ran(s.ID), "runs of task %s", s.ID)
	}
	requireNoHolders(t, b, "partner", "email")
	require.LessOrEqual(t, peakLimited, 5, "%d partner tasks ran at once under limits of at most 5", peakLimited)
	require.GreaterOrEqual(t, settled.runs, 20, "the backlog drained before the limit settled: nothing checked")
	require.LessOrEqual(t, settled.peak, 2, "%d partner tasks ran at once under the settled limit of 2", settled.peak)
}

// A raised limit starts its parked backlog at once: with 15 deliveries
// parked behind a limit of 1 and a slow handler, raising it to 4 hands
// them back (unparkAll), the first takes a slot, the others park again
// behind its take, and then take the other free slots together (tookSlots
// and fill): two writes to AX_LIMITS for the three free slots. The
// handlers run 4 at once within milliseconds (3 s allowed on a loaded
// machine), never more, and every task succeeds once. Fails
// if fill takes no slots (the parked deliveries then start only as a
// running task hands its slot on: never more than 2 at once), or if the
// deliveries handed back skip the limit (8 at once).
func TestLimitRaiseStartsParkedBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{AckWait: time.Minute})
	ctx := context.Background()
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})
	g := newRunCounter(300 * time.Millisecond)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("partner", g.handler, nil))
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: 30 * time.Second, Registry: reg, Concurrency: 8})
	const tasks = 16
	var specs []ax.TaskSpec
	for i := range tasks {
		specs = append(specs, ax.TaskSpec{Type: "partner", Key: fmt.Sprintf("p%d", i), ID: fmt.Sprintf("partner-%d", i)})
	}
	_, err := b.Client.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return g.running() == 1 && w.Stats().Limited >= tasks-1
	}, 30*time.Second, time.Millisecond, "the backlog never parked")
	require.Equal(t, 1, g.peakNow())

	limitsWrites := func() uint64 { // the writes to AX_LIMITS so far
		stream, err := b.JS.Stream(ctx, kv.StreamName(streams.Names{}.LimitsBucket()))
		require.NoError(t, err)
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.LastSeq
	}
	before := limitsWrites()
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 4}}})
	raised := time.Now()
	g.openStretch()
	require.Eventually(t, func() bool {
		return g.sinceOpened().peak >= 4
	}, 3*time.Second, time.Millisecond, "the raised limit's free slots were not taken for the parked backlog")
	t.Logf("4 running %s after the raise", time.Since(raised).Round(time.Millisecond))
	// The first delivery handed back takes its slot alone, and the others
	// take theirs together: two writes for three slots (each took its own
	// when they all went back woken: three).
	require.LessOrEqual(t, limitsWrites()-before, uint64(2), "writes to AX_LIMITS for the raised limit's three free slots")
	for _, s := range specs {
		rec := b.WaitState(t, s.ID, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "task %s", s.ID)
		require.Equal(t, 1, g.ran(s.ID), "runs of task %s", s.ID)
	}
	require.Equal(t, 4, g.peakNow(), "more than the raised limit ran at once")
	requireNoHolders(t, b, "partner")
}
