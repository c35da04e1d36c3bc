package bench_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/stretchr/testify/require"
)

// ax bench --prefetch says it sets the workers' PrefetchPerShard: in the
// fairness scenario too, a larger prefetch takes fewer pull requests per
// task (the server's count), as in TestPrefetchTakesFewerRequests.
func TestAttackFairnessHonoursPrefetch(t *testing.T) {
	ctx := context.Background()
	o := bench.Options{Tasks: 3000, Concurrency: 64, Workers: 1, Payload: 64, Prefetch: 1} // a pull per message
	def, err := bench.Fairness(ctx, o, bench.FairnessOptions{Rate: 50})
	require.NoError(t, err)
	o.Prefetch = 32
	more, err := bench.Fairness(ctx, o, bench.FairnessOptions{Rate: 50})
	require.NoError(t, err)
	t.Logf("requests per task: prefetch 1 %.3f, prefetch 32 %.3f", def[0].Ops["requests"], more[0].Ops["requests"])
	require.Less(t, more[0].Ops["requests"], 0.5*def[0].Ops["requests"], "--prefetch ignored by the fairness scenario")
}
