package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A worker's log lines about a task name its trace when the task's message
// carries a traceparent (tracing on or not), and only its id otherwise.
func TestTaskLogsNameTheTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	core, logs := observer.New(zapcore.InfoLevel)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("doomed", func(context.Context, *worker.Task) error {
		return worker.Permanent(context.DeadlineExceeded)
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Logger: zap.New(core)})

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for id, parent := range map[string]string{"traced": "00-" + traceID + "-00f067aa0ba902b7-01", "plain": ""} {
		msg := nats.NewMsg(streams.Names{}.SubmitSubject(2, "acme", "doomed", id))
		msg.Header.Set(streams.HeaderMsgID, id)
		if parent != "" {
			msg.Header.Set(streams.HeaderTraceParent, parent)
		}
		_, err := b.JS.PublishMsg(context.Background(), msg)
		require.NoError(t, err)
	}
	b.WaitState(t, "traced", kv.StateDead)
	b.WaitState(t, "plain", kv.StateDead)
	require.Eventually(t, func() bool { return logs.FilterMessage("task_dead").Len() == 2 }, 10*time.Second, 10*time.Millisecond)
	for _, e := range logs.FilterMessage("task_dead").All() {
		fields := e.ContextMap()
		switch fields["task_id"] {
		case "traced":
			require.Equal(t, traceID, fields["trace_id"])
		case "plain":
			require.NotContains(t, fields, "trace_id")
		default:
			t.Fatalf("task_dead of %v", fields["task_id"])
		}
	}
}
