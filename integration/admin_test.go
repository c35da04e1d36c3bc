package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The operator tests below do not run in parallel: the fault suite
// (faults_test.go) runs its timing-sensitive scenarios (2 s ack waits) in
// parallel after them, without their load on a 2-core machine.

type liveBundle struct {
	js      jetstream.JetStream
	client  *ax.Client
	api     *admin.Client
	store   *kv.Store
	metrics *metrics.Metrics
}

// setupLive runs a real server, the management API and one worker with reg.
func setupLive(t *testing.T, reg *worker.Registry) *liveBundle {
	t.Helper()
	dep := axtest.Setup(t, axtest.Options{Streams: &streams.Config{AckWait: 5 * time.Second}})
	api := dep.StartAdmin(t, nil)
	m := metrics.New(&metrics.Config{JetStream: dep.JS})
	dep.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4, AckWait: 5 * time.Second,
		GracePeriod: time.Second, DefaultMaxAttempts: 2, Observer: m})
	return &liveBundle{js: dep.JS, client: dep.Client, api: api, store: dep.Store, metrics: m}
}

func (b *liveBundle) call(t *testing.T, verb string, req, resp any) error {
	return axtest.Call(b.api, verb, req, resp)
}

func (b *liveBundle) state(t tb, id string) kv.State {
	t.Helper()
	rec, _, err := storeGet(context.Background(), b.store, id)
	require.NoError(t, err)
	return rec.State
}

// Cancel a running 30 s task: its handler's context ends with
// worker.ErrCancelled within 1 s, and the task never runs again.
func TestCancelRunningTaskReachesHandler(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	started := make(chan struct{}, 4)
	ended := make(chan error, 4)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("long", func(ctx context.Context, _ *worker.Task) error {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(30 * time.Second):
			ended <- nil
			return nil
		}
	}, &worker.TypeConfig{Timeout: time.Minute}))
	b := setupLive(t, reg)
	info, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "long", Tenant: "acme"})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not start")
	}

	sent := time.Now()
	var reply admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskCancel, admin.TaskRequest{ID: info.ID}, &reply))
	require.Equal(t, kv.StateCancelled, reply.Task.State)
	require.True(t, reply.Notified, "the running worker confirms the notice")
	select {
	case cause := <-ended:
		took := time.Since(sent)
		require.ErrorIs(t, cause, worker.ErrCancelled)
		require.Less(t, took, time.Second, "the handler sees ctx.Done() within 1 s of the cancel")
		t.Logf("cancel request sent -> handler's ctx done: %s", took)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	// Longer than the 5 s ack wait: a redelivery would have run it again.
	require.Never(t, func() bool { return runs.Load() > 1 }, 7*time.Second, 100*time.Millisecond)
	require.Equal(t, kv.StateCancelled, b.state(t, info.ID))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1.0, b.taskCount(c, "long", "acme", "cancelled")) }, 10*time.Second, 50*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, uint64(0), streamDepth(c, b.js, "AX_P2")) }, 10*time.Second, 50*time.Millisecond,
		"the cancelled task's message is acked")
}

// A task that fails permanently lands in the DLQ; dlq.list shows it and
// dlq.replay puts it back READY with its attempts reset and its history
// kept; it then runs again from the dead letter's payload.
func TestReplayFromDLQ(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	payloads := make(chan string, 4)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("flaky", func(_ context.Context, task *worker.Task) error {
		if fail.Load() {
			return worker.Permanent(errors.New("downstream said no"))
		}
		payloads <- string(task.Payload)
		return nil
	}, nil))
	b := setupLive(t, reg)
	info, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "flaky", Tenant: "acme", Priority: ax.P3, Payload: []byte("order-42")})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, kv.StateDead, b.state(c, info.ID)) }, 30*time.Second, 50*time.Millisecond)

	var list admin.DLQListReply
	require.NoError(t, b.call(t, admin.VerbDLQList, admin.DLQListRequest{Filter: admin.Filter{Type: "flaky"}}, &list))
	require.Len(t, list.Letters, 1)
	require.Equal(t, info.ID, list.Letters[0].TaskID)
	require.Contains(t, list.Letters[0].Error, "downstream said no")
	require.Equal(t, "ax.submit.p3.acme.flaky."+info.ID, list.Letters[0].Subject)

	var dry admin.DLQReplayReply
	require.NoError(t, b.call(t, admin.VerbDLQReplay, admin.DLQReplayRequest{Filter: admin.Filter{Tenant: "acme"}, DryRun: true}, &dry))
	require.Equal(t, []kv.Ref{{Tenant: "acme", ID: info.ID}}, dry.Replayed)
	require.Equal(t, kv.StateDead, b.state(t, info.ID), "a dry run changes nothing")

	fail.Store(false)
	var replay admin.DLQReplayReply
	require.NoError(t, b.call(t, admin.VerbDLQReplay, admin.DLQReplayRequest{ID: info.ID}, &replay))
	require.Equal(t, []kv.Ref{{Tenant: "acme", ID: info.ID}}, replay.Replayed)
	select {
	case p := <-payloads:
		require.Equal(t, "order-42", p)
	case <-time.After(30 * time.Second):
		t.Fatal("the replayed task did not run")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, kv.StateSucceeded, b.state(c, info.ID)) }, 30*time.Second, 50*time.Millisecond)
	rec, _, err := b.store.Get(context.Background(), kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, 1, rec.Attempt, "attempts start over")
	var actions []string
	for _, m := range rec.Trail {
		actions = append(actions, string(m.To)+":"+m.Action)
	}
	require.Equal(t, []string{"RUNNING:claim", "DEAD:dead", "READY:replay", "RUNNING:claim", "SUCCEEDED:complete"}, actions[1:])
	require.NoError(t, b.call(t, admin.VerbDLQList, admin.DLQListRequest{}, &list))
	require.Zero(t, list.Total, "the replayed dead letter is removed")
	require.Equal(t, 1.0, b.taskCount(t, "flaky", "acme", "dead"))
	require.Equal(t, 1.0, b.taskCount(t, "flaky", "acme", "succeeded"))
}

// A task paused before any worker saw it stays put with its payload, and
// runs once resumed; the worker drops the older generation.
func TestPauseResumeWithWorker(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(context.Context, *worker.Task) error { runs.Add(1); return nil }, nil))
	gate := make(chan struct{})
	require.NoError(t, reg.Handle("gate", func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}, nil))
	b := setupLive(t, reg)
	// Occupy the worker's 4 slots so that the next task waits READY: the
	// job is submitted only once all four run (submitted together, the
	// job could be taken before the last of them).
	var gates []string
	for range 4 {
		gate, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "gate", Priority: ax.P0})
		require.NoError(t, err)
		gates = append(gates, gate.ID)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range gates {
			assert.Equal(c, kv.StateRunning, b.state(c, id))
		}
	}, 30*time.Second, 20*time.Millisecond, "the four gate tasks hold the worker's slots")
	info, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "job", Priority: ax.P4})
	require.NoError(t, err)
	var reply admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskPause, admin.TaskRequest{ID: info.ID}, &reply))
	close(gate)
	require.Never(t, func() bool { return runs.Load() > 0 }, 2*time.Second, 50*time.Millisecond)
	require.Equal(t, kv.StatePaused, b.state(t, info.ID))
	require.NoError(t, b.call(t, admin.VerbTaskResume, admin.TaskRequest{ID: info.ID}, &reply))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, kv.StateSucceeded, b.state(c, info.ID)) }, 30*time.Second, 50*time.Millisecond)
	require.Never(t, func() bool { return runs.Load() > 1 }, 7*time.Second, 100*time.Millisecond)
}

// taskCount reads ax_tasks_total for a type, tenant and outcome (all priorities).
func (b *liveBundle) taskCount(t tb, taskType, tenant, outcome string) float64 {
	t.Helper()
	families, err := b.metrics.Registry().Gather()
	require.NoError(t, err)
	var n float64
	for _, f := range families {
		if f.GetName() != "ax_tasks_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["type"] == taskType && labels["tenant"] == tenant && labels["outcome"] == outcome {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func streamDepth(t tb, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	require.NoError(t, err)
	return s.CachedInfo().State.Msgs
}
