package bench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/ax-mesh/ax/internal/cli"
	"github.com/stretchr/testify/require"
)

// childEnv makes this test binary act as the ax binary, for the server
// process a TCP run starts.
const childEnv = "AX_BENCH_TEST_AX"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	flag.Parse()
	if testing.Short() {
		// Every test here runs a load scenario against a server of its
		// own: the fast tier leaves them to the whole suite.
		fmt.Println("bench: skipped under -short (load scenarios)")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Over TCP the server runs in its own process: its CPU is counted apart
// and in the total, and the server's statistics count the baseline's one
// write, one delivery and one ack per message, and ax's record writes.
func TestThroughputOverTCP(t *testing.T) {
	t.Setenv(childEnv, "1")
	ctx := context.Background()
	o := bench.Options{Tasks: 300, Concurrency: 8, Workers: 1, Payload: 64, ServerCommand: []string{os.Args[0], "server"}}

	base, err := bench.Baseline(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "tcp", base.Transport)
	require.InDelta(t, base.ClientCPUMicros+base.ServerCPUMicros, base.CPUMicrosPer, 0.01)
	require.Equal(t, 1.0, base.Ops["msg_writes"])
	require.Equal(t, 1.0, base.Ops["acks"])
	require.Equal(t, 1.0, base.Ops["deliveries"])
	require.Zero(t, base.Ops["kv_writes"])

	tp, err := bench.Throughput(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "tcp", tp.Transport)
	require.Positive(t, tp.ServerCPUMicros)
	require.Positive(t, tp.ClientCPUMicros)
	require.Equal(t, 1.0, tp.Ops["msg_writes"])
	require.Equal(t, 1.0, tp.Ops["acks"])
	require.GreaterOrEqual(t, tp.Ops["records"], 1.0, "at least the completion writes the record")
}

// The workflow scenario over TCP, small: every task of the fan-out and of
// the chain runs once and after its parents, and the figures are there.
func TestWorkflowScenario(t *testing.T) {
	t.Setenv(childEnv, "1")
	o := bench.Options{Concurrency: 8, Workers: 1, ServerCommand: []string{os.Args[0], "server"}}
	results, err := bench.Workflow(context.Background(), o, bench.WorkflowOptions{FanOut: 1_500, Chain: 30})
	require.NoError(t, err)
	require.Len(t, results, 4)
	fan, chain := results[2], results[3]
	require.Equal(t, "wf-fanout", fan.Scenario)
	require.Equal(t, int64(1_500), fan.Counts["children"])
	require.Equal(t, int64(3), fan.Counts["joins"], "a join per 1,000 children, and the last")
	require.Equal(t, int64(1_500+1_500+2), fan.Counts["edges"])
	require.Equal(t, "wf-chain", chain.Scenario)
	for _, r := range []*bench.Result{fan, chain} {
		require.Zero(t, r.Counts["missing"], r.Scenario)
		require.Zero(t, r.Counts["duplicated"], r.Scenario)
		require.Zero(t, r.Counts["before_parent"], r.Scenario)
	}
	require.Positive(t, chain.LatencyP50Ms)
	require.GreaterOrEqual(t, chain.LatencyP99Ms, chain.LatencyP50Ms)
}

// --only chain runs the chain alone (checked, with its figures), and a
// part that does not exist is refused before anything runs.
func TestWorkflowScenarioChainOnly(t *testing.T) {
	t.Setenv(childEnv, "1")
	o := bench.Options{Concurrency: 8, Workers: 1, ServerCommand: []string{os.Args[0], "server"}}
	results, err := bench.Workflow(context.Background(), o, bench.WorkflowOptions{Chain: 20, Only: "chain"})
	require.NoError(t, err)
	require.Len(t, results, 1)
	chain := results[0]
	require.Equal(t, "wf-chain", chain.Scenario)
	require.Zero(t, chain.Counts["missing"])
	require.Zero(t, chain.Counts["duplicated"])
	require.Zero(t, chain.Counts["before_parent"])
	require.Positive(t, chain.LatencyP50Ms)

	_, err = bench.Workflow(context.Background(), o, bench.WorkflowOptions{Chain: 20, Only: "fan"})
	require.ErrorContains(t, err, `--only "fan"`)
}
