package metrics_test

import (
	"context"
	"github.com/ax-mesh/ax/internal/axtest"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakOptions()...)
}

// The served metrics show task outcomes with their labels, the hooks of
// the leader loops, and bucket depth read from JetStream; Serve stops with
// its context.
func TestServeMetrics(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	for i := range 3 {
		msg := nats.NewMsg("ax.submit.p3.acme.email.k" + string(rune('a'+i)))
		_, err := js.PublishMsg(context.Background(), msg)
		require.NoError(t, err)
	}
	m := metrics.New(&metrics.Config{JetStream: js})
	m.TaskFinished("email", "acme", 3, worker.OutcomeSucceeded, 20*time.Millisecond)
	m.TaskFinished("email", "acme", 3, worker.OutcomeRetry, 2*time.Second)
	m.SetLeader(true)
	m.SetPressure(2)
	m.Repaired("READY", "dead")
	m.Repaired("READY", "dead")
	m.Repaired("RETRYING", "republished")

	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, "127.0.0.1:0", zaptest.NewLogger(t), func(a net.Addr) { addr <- a }) }()
	text := axtest.Scrape(t, "http://"+(<-addr).String()+"/metrics")
	for _, want := range []string{
		`ax_tasks_total{outcome="succeeded",priority="p3",tenant="acme",type="email"} 1`,
		`ax_tasks_total{outcome="retry",priority="p3",tenant="acme",type="email"} 1`,
		`ax_task_retries_total{priority="p3",tenant="acme",type="email"} 1`,
		`ax_task_run_seconds_count{priority="p3",type="email"} 2`,
		`ax_bucket_depth{priority="p3"} 3`,
		`ax_bucket_depth{priority="p0"} 0`,
		`ax_bucket_in_flight{priority="p3"} 0`,
		"ax_dlq_messages 0",
		"ax_leader 1",
		"ax_pressure_level 2",
		"ax_jetstream_up 1",
		`ax_reconciler_repairs_total{action="dead",state="READY"} 2`,
		`ax_reconciler_repairs_total{action="republished",state="RETRYING"} 1`,
	} {
		require.True(t, strings.Contains(text, want+"\n"), "missing %q in:\n%s", want, text)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop with its context")
	}
}

// A busy address is an error, not a silent no-op.
func TestServeBusyAddress(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	err = metrics.New(nil).Serve(context.Background(), l.Addr().String(), nil, nil)
	require.ErrorContains(t, err, "metrics: listen on")
}
