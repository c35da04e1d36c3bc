package ax_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Wait returns the result of a task that succeeds, Result reads it again,
// and a DEAD or CANCELLED task gives its final state and last error.
func TestWaitAndResult(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.StartWorker(t, worker.Config{Shards: axtest.AllShards()})

	// Wait starts before the task exists: it waits for its record.
	type waited struct {
		result []byte
		err    error
	}
	done := make(chan waited, 1)
	go func() {
		r, err := b.Client.Wait(ctx, "acme", "echo-1")
		done <- waited{r, err}
	}()
	_, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "echo-1", Tenant: "acme", Type: "echo", Payload: []byte("hi")})
	require.NoError(t, err)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "hi", string(got.result))

	result, err := b.Client.Result(ctx, "acme", "echo-1")
	require.NoError(t, err)
	require.Equal(t, "hi", string(result))
	result, err = b.Client.Wait(ctx, "acme", "echo-1") // already ended
	require.NoError(t, err)
	require.Equal(t, "hi", string(result))

	_, err = b.Client.Submit(ctx, ax.TaskSpec{ID: "fail-1", Type: "fail"})
	require.NoError(t, err)
	_, err = b.Client.Wait(ctx, "", "fail-1")
	var ended *ax.TaskEndedError
	require.ErrorAs(t, err, &ended)
	require.ErrorIs(t, err, ax.ErrNotSucceeded)
	require.Equal(t, kv.StateDead, ended.State)
	require.Equal(t, ax.DefaultTenant, ended.Tenant)
	require.Contains(t, ended.LastError, "fails by design")

	_, err = b.Client.Submit(ctx, ax.TaskSpec{ID: "later-1", Type: "echo", Delay: time.Hour})
	require.NoError(t, err)
	_, err = b.Client.Result(ctx, "", "later-1")
	require.ErrorIs(t, err, ax.ErrNotFinished)
	require.NoError(t, b.Client.CancelDelayed(ctx, ax.DefaultTenant, "later-1"))
	_, err = b.Client.Wait(ctx, "", "later-1")
	require.ErrorAs(t, err, &ended)
	require.Equal(t, kv.StateCancelled, ended.State)

	_, err = b.Client.Result(ctx, "", "nope")
	require.ErrorIs(t, err, kv.ErrNotFound)
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	_, err = b.Client.Wait(short, "", "nope")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// Submit hooks run in order around each submit, see the task, add headers
// that reach the handler, hear the outcome in reverse order, and refuse a
// task with their error or with a header ax sets.
func TestSubmitHooks(t *testing.T) {
	t.Parallel()
	var calls []string
	seen := make(chan nats.Header, 1)
	hook := func(name string) ax.SubmitHook {
		return func(ctx context.Context, task ax.TaskSpec, header nats.Header) (func(ax.TaskInfo, error), error) {
			calls = append(calls, name+" before "+task.Tenant+"/"+task.ID)
			header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			header.Set("Ax-Hook-"+name, "yes")
			return func(info ax.TaskInfo, err error) {
				calls = append(calls, name+" after "+info.ID+" "+errString(err))
			}, nil
		}
	}
	b := axtest.Setup(t, axtest.Options{Client: &ax.Config{SubmitHooks: []ax.SubmitHook{hook("a"), hook("b")}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("look", func(ctx context.Context, task *worker.Task) error {
		if task.ID == "t-1" {
			seen <- task.Headers
		}
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Shards: axtest.AllShards()})

	_, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "t-1", Type: "look"})
	require.NoError(t, err)
	require.Equal(t, []string{"a before default/t-1", "b before default/t-1", "b after t-1 <nil>", "a after t-1 <nil>"}, calls)
	headers := <-seen
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", headers.Get("traceparent"))
	require.Equal(t, "yes", headers.Get("Ax-Hook-a"))
	require.Equal(t, "yes", headers.Get("Ax-Hook-b"))

	calls = nil
	_, err = b.Client.SubmitBatch(ctx, []ax.TaskSpec{{ID: "t-2", Type: "look"}, {ID: "t-3", Type: "look"}})
	require.NoError(t, err)
	sort.Strings(calls)
	require.Equal(t, []string{"a after t-2 <nil>", "a after t-3 <nil>", "a before default/t-2", "a before default/t-3",
		"b after t-2 <nil>", "b after t-3 <nil>", "b before default/t-2", "b before default/t-3"}, calls)

	refuse := errors.New("refused by policy")
	c, err := ax.NewClient(ctx, b.JS, &ax.Config{SubmitHooks: []ax.SubmitHook{
		func(context.Context, ax.TaskSpec, nats.Header) (func(ax.TaskInfo, error), error) { return nil, refuse },
	}})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Submit(ctx, ax.TaskSpec{ID: "t-4", Type: "look"})
	require.ErrorIs(t, err, refuse)
	_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "t-4"})
	require.ErrorIs(t, err, kv.ErrNotFound, "a refused task is not stored")

	c2, err := ax.NewClient(ctx, b.JS, &ax.Config{SubmitHooks: []ax.SubmitHook{
		func(_ context.Context, _ ax.TaskSpec, h nats.Header) (func(ax.TaskInfo, error), error) {
			h.Set("Ax-Task-Id", "other")
			return nil, nil
		},
	}})
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Submit(ctx, ax.TaskSpec{ID: "t-5", Type: "look"})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// BenchmarkWait reports how long after a task's end (its FinishedAt, set
// just before the SUCCEEDED write) Wait returns: p50 and p99 in ms. The
// target is a p99 of at most 5 ms.
func BenchmarkWait(b *testing.B) {
	tb := axtest.Setup(b, axtest.Options{})
	ctx := context.Background()
	tb.StartWorker(b, worker.Config{Shards: axtest.AllShards()})
	var lags []time.Duration
	for b.Loop() {
		info, err := tb.Client.Submit(ctx, ax.TaskSpec{Type: "echo", Payload: []byte("x")})
		require.NoError(b, err)
		_, err = tb.Client.Wait(ctx, info.Tenant, info.ID)
		returned := time.Now()
		require.NoError(b, err)
		rec, _, err := tb.Client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		require.NoError(b, err)
		lags = append(lags, returned.Sub(*rec.FinishedAt))
	}
	slices.Sort(lags)
	at := func(q float64) float64 {
		return float64(lags[min(len(lags)-1, int(q*float64(len(lags))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// A client whose user may not create the consumer a watch needs fails
// Wait at once, naming the user and the subject, and says to use Result.
func TestWaitWithoutPermissionFailsFast(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`
authorization {
  users: [
    { user: admin, password: admin }
    { user: reader, password: reader, permissions: {
        publish: { allow: [">"], deny: ["$JS.API.CONSUMER.CREATE.KV_AX_TASKS.>"] }
        subscribe: { allow: [">"] } } }
  ]
}
`), 0o600))
	srv := natstest.Start(t, natstest.Options{ConfigFile: conf})
	_, adminJS := srv.Connect(nats.UserInfo("admin", "admin"))
	natstest.Provision(t, adminJS, nil)
	_, js := srv.Connect(nats.UserInfo("reader", "reader"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	info, err := client.Submit(ctx, ax.TaskSpec{Type: "echo"})
	require.NoError(t, err)
	start := time.Now()
	_, err = client.Wait(ctx, info.Tenant, info.ID)
	require.ErrorIs(t, err, nats.ErrPermissionViolation)
	require.ErrorContains(t, err, "permission denied: user reader may not publish $JS.API.CONSUMER.CREATE.KV_AX_TASKS")
	require.ErrorContains(t, err, "Client.Result")
	require.Less(t, time.Since(start), 4*time.Second)
	_, err = client.Result(ctx, info.Tenant, info.ID)
	require.ErrorIs(t, err, ax.ErrNotFinished, "Result needs no watch")
}
