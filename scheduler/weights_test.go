package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A tenant's weight is its share of its priority's starts on a fair
// deployment: with "heavy" weighing 3 and both tenants' backlogs waiting,
// the handlers count about three of heavy's starts for each of light's
// (1:1 when the dispatch ignores weights).
func TestTenantWeightsShareStarts(t *testing.T) {
	t.Parallel()
	const weight = 3
	b := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutFair, Tenants: []string{"heavy", "light"}}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	ctx := context.Background()
	board, err := control.Open(ctx, b.JS, streams.Names{})
	require.NoError(t, err)
	limits, err := json.Marshal(kv.Limits{Limits: map[string]kv.Limit{"tenant:heavy": {Weight: weight}}})
	require.NoError(t, err)
	_, err = board.Put(ctx, kv.LimitsKey, limits)
	require.NoError(t, err)

	submitJobs(t, b.Client, "heavy", 1500)
	submitJobs(t, b.Client, "light", 1500)
	s := newStarts()
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "job", s.handler(2*time.Millisecond)), Concurrency: 4})
	require.Eventually(t, func() bool { return s.count("heavy")+s.count("light") >= 1000 }, 60*time.Second, 5*time.Millisecond)
	heavy, light := s.count("heavy"), s.count("light")
	t.Logf("starts: heavy %d, light %d (ratio %.2f)", heavy, light, float64(heavy)/float64(max(light, 1)))
	require.Less(t, heavy, 1500, "heavy's backlog drained: the test proves nothing")
	require.InDelta(t, weight, float64(heavy)/float64(max(light, 1)), 0.8, "heavy %d, light %d", heavy, light)
}
