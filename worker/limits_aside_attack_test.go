package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/ax-mesh/ax/worker"
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
	b.startLeader(t)
	ctx := context.Background()
	producer, err := ax.NewClient(ctx, b.js, &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	var limited, free gauge
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("partner", limited.handler(100*time.Millisecond), nil))
	require.NoError(t, reg.Handle("email", free.handler(0), nil))
	w, _ := b.startWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	setLimits(t, b.js, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})
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
		b.waitState(t, e.ID, kv.StateSucceeded)
	}
	ranBefore := limited.executions.Load()
	require.LessOrEqual(t, ranBefore, int64(20), "the unlimited tasks waited behind the limited backlog")

	aside := 0
	for _, s := range specs {
		rec := b.waitState(t, s.ID, kv.StateSucceeded)
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
