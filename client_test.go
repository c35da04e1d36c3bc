package ax_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

func TestSubmitWritesReadyRecord(t *testing.T) {
	t.Parallel()
	b := axtest.Fast(t)
	ctx := context.Background()
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Tenant: "acme", Key: "user-7", Priority: ax.P3,
		Payload: []byte("hi"), Timeout: 5 * time.Second, MaxAttempts: 4, Core: true, Deadline: deadline,
		Headers: map[string]string{"Ax-Trace": "abc"}})
	require.NoError(t, err)
	require.NotEmpty(t, info.ID)
	require.Equal(t, "AX_P3", info.Stream)
	require.Equal(t, streams.Shard("user-7"), info.Shard)

	rec, _, err := b.Client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err, "a task is known right after Submit returns")
	require.Equal(t, kv.StateReady, rec.State)
	require.Equal(t, "acme", rec.Tenant)
	require.Equal(t, 4, rec.MaxAttempts)
	require.Equal(t, kv.Duration(5*time.Second), rec.Timeout)
	require.True(t, rec.Core)
	require.True(t, deadline.Equal(*rec.Deadline))
	require.Equal(t, info.Sequence, rec.StreamSeq)

	s, err := b.JS.Stream(ctx, "AX_P3")
	require.NoError(t, err)
	msg, err := s.GetMsg(ctx, info.Sequence)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("ax.p3.%d.acme.email.user-7", info.Shard), msg.Subject)
	msgID := msg.Header.Get("Nats-Msg-Id")
	require.Equal(t, info.ID, streams.TaskIDOf(msgID))
	require.Greater(t, len(msgID), len(info.ID)+1, "a token of the submit's own follows the id: %s", msgID)
	require.Equal(t, "5s", msg.Header.Get("Ax-Timeout"))
	require.Equal(t, "4", msg.Header.Get("Ax-Max-Attempts"))
	require.Empty(t, msg.Header.Get("Ax-Core"), "core is the subject it was published on, not a header")
	require.Equal(t, "1", msg.Header.Get("Ax-Gen"))
	require.Equal(t, "abc", msg.Header.Get("Ax-Trace"))
	require.Equal(t, "hi", string(msg.Data))
}

func TestSubmitIsIdempotent(t *testing.T) {
	t.Parallel()
	b := axtest.Fast(t)
	ctx := context.Background()
	first, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "order-1", Type: "ship"})
	require.NoError(t, err)
	again, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "order-1", Type: "ship"})
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Sequence, again.Sequence)
	require.EqualValues(t, 1, natstest.StreamMsgs(t, b.JS, "AX_P2"))

	// The same id in another bucket is reported as a duplicate; the copy it
	// stored is dropped by the worker that sees it.
	other, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "order-1", Type: "ship", Priority: ax.P3})
	require.NoError(t, err)
	require.True(t, other.Duplicate)
	rec, _, err := b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "order-1"})
	require.NoError(t, err)
	require.Equal(t, 2, rec.Priority, "the record keeps the first bucket")
}

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	b := axtest.Fast(t)
	for _, tc := range []struct {
		name  string
		task  ax.TaskSpec
		field string
	}{
		{"no type", ax.TaskSpec{}, "Type"},
		{"dotted type", ax.TaskSpec{Type: "a.b"}, "Type"},
		{"tenant with space", ax.TaskSpec{Type: "x", Tenant: "a b"}, "Tenant"},
		{"key wildcard", ax.TaskSpec{Type: "x", Key: "k*"}, "Key"},
		{"priority high", ax.TaskSpec{Type: "x", Priority: "p5"}, "Priority"},
		{"priority not a name", ax.TaskSpec{Type: "x", Priority: "2"}, "Priority"},
		{"timeout", ax.TaskSpec{Type: "x", Timeout: -time.Second}, "Timeout"},
		{"attempts", ax.TaskSpec{Type: "x", MaxAttempts: -1}, "MaxAttempts"},
		{"deadline", ax.TaskSpec{Type: "x", Deadline: time.Now().Add(-time.Hour)}, "Deadline"},
		{"id", ax.TaskSpec{Type: "x", ID: "a.b"}, "ID"},
		{"header", ax.TaskSpec{Type: "x", Headers: map[string]string{"X-Foo": "1"}}, "header"},
		// Issue 13.1: at 54cd21a any "Ax-" header passed, internal ones included.
		{"internal header", ax.TaskSpec{Type: "x", Headers: map[string]string{"Ax-Task-Id": "victim"}}, "set by ax"},
		{"internal header, other case", ax.TaskSpec{Type: "x", Headers: map[string]string{"ax-gen": "7"}}, "set by ax"},
		{"option header", ax.TaskSpec{Type: "x", Headers: map[string]string{"Ax-Core": "true"}}, "set by ax"},
		// Issue 17.12: at 54cd21a 1000 h and the year 2099 were accepted.
		{"timeout above the bound", ax.TaskSpec{Type: "x", Timeout: 1000 * time.Hour}, "above the limit"},
		{"run time too far ahead", ax.TaskSpec{Type: "x", RunAt: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)}, "ahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Client.Submit(context.Background(), tc.task)
			require.ErrorIs(t, err, ax.ErrInvalidTask)
			require.Contains(t, err.Error(), tc.field)
		})
	}
	require.Zero(t, natstest.StreamMsgs(t, b.JS, "AX_P2"))
}

// A batch far larger than the async publish window lands every task once.
func TestSubmitBatchSurvivesStalls(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{Client: &ax.Config{MaxPending: 16}})
	ctx := context.Background()
	tasks := make([]ax.TaskSpec, 5000)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "noop", Priority: ax.PriorityOf(i % 5)}
	}
	infos, err := b.Client.SubmitBatch(ctx, tasks)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, info := range infos {
		require.False(t, seen[info.ID])
		seen[info.ID] = true
	}
	var total uint64
	for p := range streams.Priorities {
		n := natstest.StreamMsgs(t, b.JS, fmt.Sprintf("AX_P%d", p))
		require.EqualValues(t, 1000, n)
		total += n
	}
	require.EqualValues(t, 5000, total)
	// Tasks of generated ids and keys: their records are written at the claim.
	countKeys := func() int {
		keys, err := b.Client.Store().Bucket().ListKeys(ctx)
		require.NoError(t, err)
		n := 0
		for range keys.Keys() {
			n++
		}
		return n
	}
	require.Zero(t, countKeys())

	// Re-submitting the same ids, with ids of the submitter's own, doubles
	// no record: each id's record is written once.
	for i := range tasks {
		tasks[i].ID = infos[i].ID
	}
	again, err := b.Client.SubmitBatch(ctx, tasks)
	require.NoError(t, err)
	require.Equal(t, 5000, countKeys())
	third, err := b.Client.SubmitBatch(ctx, tasks)
	require.NoError(t, err)
	for i, info := range third {
		require.True(t, info.Duplicate)
		require.Equal(t, again[i].Sequence, info.Sequence)
	}
}

// A full bucket refuses the excess with ErrOverloaded and stores nothing of it.
func TestSubmitBatchFullBucket(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{Streams: &streams.Config{Capacity: 100}, Client: &ax.Config{MaxPending: 32}})
	ctx := context.Background()
	tasks := make([]ax.TaskSpec, 150)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "noop", Priority: ax.P2}
	}
	infos, err := b.Client.SubmitBatch(ctx, tasks)
	var batchErr *ax.BatchError
	require.ErrorAs(t, err, &batchErr)
	require.ErrorIs(t, err, ax.ErrOverloaded)
	require.Len(t, batchErr.Failed, 50)
	require.EqualValues(t, 100, natstest.StreamMsgs(t, b.JS, "AX_P2"))
	for i, info := range infos {
		_, getErr := axtest.Record(ctx, b.Client.Store(), info.ID)
		if batchErr.Failed[i] != nil {
			require.ErrorIs(t, batchErr.Failed[i], ax.ErrOverloaded)
			require.ErrorIs(t, getErr, kv.ErrNotFound, "a refused task is not known")
		} else {
			require.NoError(t, getErr, "an accepted task is known (READY in its bucket)")
		}
	}
	_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "noop", Priority: ax.P2})
	require.ErrorIs(t, err, ax.ErrOverloaded)
	require.True(t, strings.Contains(err.Error(), "maximum messages"), err.Error())
	require.False(t, errors.Is(err, ax.ErrInvalidTask))
}

// A client on a server where the deployment is not provisioned fails at
// once rather than at the first submit (README: "fails if the deployment
// is not provisioned").
func TestNewClientNeedsAProvisionedDeployment(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	_, err := ax.NewClient(context.Background(), js, nil)
	require.Error(t, err)
}
