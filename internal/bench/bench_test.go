package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/stretchr/testify/require"
)

// Every scenario runs at a tiny size and reports sane figures; the article
// scenario counts no lost and no duplicated task.
func TestScenariosRun(t *testing.T) {
	ctx := context.Background()
	o := bench.Options{Tasks: 300, Concurrency: 8, Workers: 1, Payload: 64}

	base, err := bench.Baseline(ctx, o)
	require.NoError(t, err)
	require.Equal(t, 300, base.Tasks)
	require.Positive(t, base.CompletePerSec)

	tp, err := bench.Throughput(ctx, o)
	require.NoError(t, err)
	require.Positive(t, tp.CompletePerSec)
	require.Positive(t, tp.LatencyP50Ms)
	require.GreaterOrEqual(t, tp.LatencyMaxMs, tp.LatencyP99Ms)

	lat, err := bench.Latency(ctx, o, 200, time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, lat.Tasks)

	pri, err := bench.Priority(ctx, o, 500, 50, time.Second)
	require.NoError(t, err)
	require.Equal(t, 50, pri.Tasks)

	art, err := bench.Article(ctx, bench.Options{Tasks: 400, Concurrency: 8, Workers: 2, Payload: 64}, bench.ArticleOptions{TimeScale: 0.001})
	require.NoError(t, err)
	require.Zero(t, art.Counts["lost"])
	require.Zero(t, art.Counts["duplicates"])
	require.Equal(t, art.Counts["planned_fail_always"], art.Counts["dead"])
	require.Equal(t, art.Counts["dead"], art.Counts["dlq_messages"])
	require.Equal(t, art.Counts["planned_fail_once"], art.Counts["retries"])

	del, err := bench.Delay(ctx, bench.Options{Tasks: 100, Payload: 64}, 12*time.Second)
	require.NoError(t, err)
	require.Equal(t, 100, del.Tasks)
	require.GreaterOrEqual(t, del.Extra["min_ms"], 0.0, "no task released before it was due")
}
