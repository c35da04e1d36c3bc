package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/ax-mesh/ax/internal/streams"
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

	paced, err := bench.PacedBaseline(ctx, o, 200, time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, paced.Tasks)
	require.InDelta(t, 200, paced.CompletePerSec, 60, "paced at the rate, not faster")
	require.Positive(t, paced.LatencyP50Ms)
	require.InDelta(t, 1, paced.Ops["msg_writes"], 0.05, "one stored message a task")

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

// The floor-claimcreate scenario does ax's server operations per task: the
// same stored messages, record writes, acks and deliveries as a throughput run;
// its other plans do the record writes and reads they say.
func TestFloorDoesAxsOperations(t *testing.T) {
	ctx := context.Background()
	o := bench.Options{Tasks: 300, Concurrency: 8, Workers: 1, Payload: 64}
	tp, err := bench.Throughput(ctx, o)
	require.NoError(t, err)
	records := map[string]float64{"floor": 3, "floor-noread": 3, "floor-claimcreate": 2, "floor-outcome": 1, "floor-async": 3, "floor-pipelined": 3,
		"floor-pipelined-noread": 3, "floor-pipelined-claimcreate": 2, "floor-pipelined-outcome": 1}
	requests := map[string]float64{}
	for _, plan := range bench.FloorPlans() {
		r, err := bench.Floor(ctx, o, plan)
		require.NoError(t, err, plan.Name)
		require.Equal(t, 300, r.Tasks)
		require.Equal(t, records[plan.Name], r.Ops["records"], plan.Name)
		// ax's run ends when its last handler starts: a few of its last
		// writes and acks may land after its snapshot (2.97 records per
		// task was seen), hence the tolerance.
		for _, op := range []string{"msg_writes", "acks", "deliveries"} {
			if op == "deliveries" && r.ElapsedSeconds > streams.DefaultAckWait.Seconds() && r.Ops[op] > tp.Ops[op] {
				// A pull that a starved client ended on its own timer
				// (nats.go: its expiry + 1 s) drops the messages it was
				// sent; they come back after the ack wait, so a run that
				// lasted longer (CI's loaded runs: 1.46 deliveries per
				// task) delivers more, and only then.
				t.Logf("%s: %v deliveries per task against ax's %v, in %.0f s: redelivered after the ack wait", plan.Name, r.Ops[op], tp.Ops[op], r.ElapsedSeconds)
				continue
			}
			require.InDelta(t, tp.Ops[op], r.Ops[op], 0.05, "%s: %s per task: ax %v, floor %v", plan.Name, op, tp.Ops[op], r.Ops[op])
		}
		if plan.Name == "floor-claimcreate" {
			// The Go client writes no record for a task whose id it made:
			// the claim creates it (docs/decisions/record-at-claim.md).
			require.InDelta(t, tp.Ops["records"], r.Ops["records"], 0.05, "ax's record writes")
		}
		requests[plan.Name] = r.Ops["requests"]
		async := int64(0)
		if plan.AsyncPersist {
			async = 2 // the P2 stream and the task bucket
		}
		require.Equal(t, async, r.Counts["async_persist_streams"], plan.Name)
	}
	// "floor" reads at least once per task (again while a create, sent
	// after its chunk's messages, is on its way: 1.49 per task was seen on
	// a loaded machine); the plans that need no read never read.
	require.GreaterOrEqual(t, requests["floor"], 0.95, "requests per task %v", requests)
	for _, name := range []string{"floor-noread", "floor-claimcreate", "floor-outcome"} {
		require.Less(t, requests[name], 0.2, "%s: requests per task %v", name, requests)
	}
	// The pipelined plans read a pull's records in one request, if at all;
	// their pulls are requests too (0.21 per task seen in CI's loaded run
	// for those that never read).
	for _, name := range []string{"floor-pipelined", "floor-pipelined-noread", "floor-pipelined-claimcreate", "floor-pipelined-outcome"} {
		require.Less(t, requests[name], 0.5, "%s: requests per task %v", name, requests)
	}
}

// A pipelined plan pulls at most FloorBatch messages a time (so at least
// one pull request per FloorBatch tasks); with FloorLoops fetch loops on
// each consumer it still writes each task's two records once.
func TestFloorBatchAndLoops(t *testing.T) {
	ctx := context.Background()
	o := bench.Options{Tasks: 300, Concurrency: 8, Workers: 1, Payload: 64, FloorBatch: 2, FloorLoops: 2}
	var plan bench.FloorPlan
	for _, p := range bench.FloorPlans() {
		if p.Name == "floor-pipelined-claimcreate" {
			plan = p
		}
	}
	r, err := bench.Floor(ctx, o, plan)
	require.NoError(t, err)
	require.Equal(t, 300, r.Tasks)
	require.Equal(t, 2.0, r.Ops["records"])
	require.GreaterOrEqual(t, r.Ops["requests"], 0.5, "pulls of at most 2 messages")
}

// The limits scenario runs at a small size: the handlers never see more
// limited executions at once than the limit, and the limit is used.
func TestLimitsScenarioRuns(t *testing.T) {
	r, err := bench.Limits(context.Background(), bench.Options{Tasks: 300, Concurrency: 16, Workers: 3, Payload: 64}, 0)
	require.NoError(t, err)
	require.LessOrEqual(t, r.Extra["peak_concurrent"], float64(bench.LimitsConcurrency))
	// The limit is used (its full use is worker/TestConcurrencyLimitAcrossWorkers's
	// to show; a loaded machine may leave one slot unused for the whole run).
	require.GreaterOrEqual(t, r.Extra["peak_concurrent"], float64(bench.LimitsConcurrency/2))
	require.Positive(t, r.Extra["utilisation"])
	require.Positive(t, r.Extra["free_ratio_to_alone"])
	// Against the mean of the two runs alone, never below the ratio to the
	// faster of them.
	require.GreaterOrEqual(t, r.Extra["free_ratio_to_mean_alone"], r.Extra["free_ratio_to_alone"])
	// The same use, split at the free type's end (either part may be empty
	// at this size: then 0).
	for _, k := range []string{"utilisation_beside_free", "utilisation_after_free"} {
		require.Contains(t, r.Extra, k)
		require.InDelta(t, 0.5, r.Extra[k], 0.5, k)
	}
	t.Logf("%+v", r.Extra)
}

// The rate-limit scenario runs briefly: the handlers never see more starts
// in a second than the rate and the burst, and the limit is used.
func TestRateLimitsScenarioRuns(t *testing.T) {
	const rate, burst = 50, 5
	r, err := bench.RateLimits(context.Background(), bench.Options{Tasks: 120, Concurrency: 16, Workers: 3, Payload: 64}, rate, burst)
	require.NoError(t, err)
	require.LessOrEqual(t, r.Extra["most_starts_in_1s"], float64(rate+burst))
	require.Greater(t, r.Extra["most_starts_in_1s"], float64(rate/2))
	require.Positive(t, r.Extra["rate_used"])
	t.Logf("%+v", r.Extra)
}

// The fairness scenario runs briefly on a fair deployment: the paced
// tenant's tasks start while the backlog drains, at a p50 far below the
// drain's length (about a tenth of it or more without fair shares,
// --shared-layout), and the ratio is reported.
func TestFairnessScenarioRuns(t *testing.T) {
	const shared = false
	rs, err := bench.Fairness(context.Background(), bench.Options{Tasks: 3000, Concurrency: 16, Workers: 1, Payload: 64}, bench.FairnessOptions{Rate: 50, Shared: shared})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	beside := rs[1]
	require.Equal(t, "fairness-fair", beside.Scenario)
	require.Positive(t, beside.Extra["paced_tasks"])
	require.Positive(t, beside.Extra["bulk_ratio_to_alone"])
	t.Logf("%+v p50 %.1f ms p99 %.1f ms, drain %.2f s", beside.Extra, beside.LatencyP50Ms, beside.LatencyP99Ms, beside.ElapsedSeconds)
	require.Less(t, beside.LatencyP50Ms, 1000*beside.ElapsedSeconds/10, "the paced tenant waited behind the backlog")
}

// The fairness scenario between two keys of one tenant (--by-key): the
// paced key's tasks start while the one-shard backlog of slow tasks drains,
// at a p50 far below the drain's length. On 4 slots of 50 ms a slot frees
// less often than a pull's round trip, so by age alone (the shards one
// group of the dispatch queue) the backlog wins nearly every slot: p50
// 1,080 and 1,249 ms against a 3.2 s drain, where the turns give 27 ms.
// The paced key's 10 tasks a second stay well within its share of a turn
// each on a loaded machine (at 50 a second, more than half of what CI's
// 4 slots ran under the race detector, its own queue grew). Under the race
// detector, at 10 a second, the dispatch by age passed too (p50 176 ms
// against 25 with the turns): that the turns are what keeps another key's
// tasks moving is worker's TestKeysTakeTurns to show; this test shows the
// scenario runs and catches a paced key left behind the whole backlog.
func TestFairnessByKeyScenarioRuns(t *testing.T) {
	rs, err := bench.Fairness(context.Background(), bench.Options{Tasks: 240, Concurrency: 4, Workers: 1, Payload: 64},
		bench.FairnessOptions{Rate: 10, ByKey: true, Hold: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	beside := rs[1]
	require.Equal(t, "fairness-keys", beside.Scenario)
	require.Positive(t, beside.Extra["paced_tasks"])
	t.Logf("%+v p50 %.1f ms p99 %.1f ms, drain %.2f s", beside.Extra, beside.LatencyP50Ms, beside.LatencyP99Ms, beside.ElapsedSeconds)
	require.Less(t, beside.LatencyP50Ms, 1000*beside.ElapsedSeconds/10, "the paced key waited behind the backlog")
}

// A larger prefetch (ax worker --prefetch) takes fewer pull requests per
// task from a backlog: the server's own count, not a timer.
func TestPrefetchTakesFewerRequests(t *testing.T) {
	ctx := context.Background()
	o := bench.Options{Tasks: 3000, Concurrency: 64, Workers: 1, Payload: 64, Prefetch: 1} // a pull per message
	def, err := bench.Throughput(ctx, o)
	require.NoError(t, err)
	o.Prefetch = 32
	more, err := bench.Throughput(ctx, o)
	require.NoError(t, err)
	t.Logf("requests per task: prefetch 1 %.3f, prefetch 32 %.3f", def.Ops["requests"], more.Ops["requests"])
	require.Less(t, more.Ops["requests"], 0.5*def.Ops["requests"])
}

// A publish-only client's tasks are claimed as raw publishes are: the
// worker creates each record with its claim at once, without first
// reading for a record the client never writes (the server's count of
// requests, reads among them, not a timer).
func TestPublishOnlyTasksClaimWithoutReads(t *testing.T) {
	ctx := context.Background()
	o := bench.Options{Tasks: 3000, Concurrency: 64, Workers: 1, Payload: 64, PublishOnly: true}
	r, err := bench.Throughput(ctx, o)
	require.NoError(t, err)
	t.Logf("publish-only: %+v", r.Ops)
	require.InDelta(t, 2.0, r.Ops["kv_writes"], 0.05, "a create with the claim, and the outcome")
	require.Less(t, r.Ops["requests"], 0.5, "reads for a record the client never writes")
}
