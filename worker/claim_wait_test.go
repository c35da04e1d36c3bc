package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// publishGoStyle publishes what a Go client's Submit publishes for task id
// (Ax-Gen 1) and returns the stream and sequence its record must name.
func publishGoStyle(t *testing.T, b *testBundle, id string) (string, uint64) {
	t.Helper()
	msg := nats.NewMsg(streams.DefaultNames().SubmitSubject(2, "default", "echo", id))
	msg.Data = []byte(`{}`)
	streams.Options{ID: id, Timeout: time.Minute, MaxAttempts: 3, Gen: 1}.SetHeaders(msg.Header)
	ack, err := b.JS.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
	return ack.Stream, ack.Sequence
}

// goStyleRecord is the READY record a Go client's Submit writes after the
// publish.
func goStyleRecord(id, stream string, seq uint64) *kv.Record {
	rec := &kv.Record{ID: id, Type: "echo", Tenant: "default", Key: id, Priority: 2, State: kv.StateReady,
		MaxAttempts: 3, Timeout: kv.Duration(time.Minute)}
	rec.Bind(1, stream, seq)
	return rec
}

// An idle worker gets a Go-submitted message before the client has written
// its record (Submit publishes first). It waits for the client's create
// instead of racing it: the record is born by the submit, not by the
// worker, and the task runs once. Without the wait the worker created the
// record itself, the client's create failed, and each such task cost a
// second record read (2.3 reads per task at 2,000 tasks/s).
func TestClaimWaitsForTheClientsCreate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.StartWorker(t, worker.Config{ID: "w", Concurrency: 4})
	for i := range 5 {
		id := fmt.Sprintf("late-record-%d", i)
		stream, seq := publishGoStyle(t, b, id)
		time.Sleep(2 * time.Millisecond) // the client's create comes a little after its publish
		_, _, err := b.Store.Create(context.Background(), goStyleRecord(id, stream, seq), kv.Actor{Action: "submit"})
		require.NoError(t, err, "the worker created the record of %s before the client", id)
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, "submit", rec.Trail[0].Action, "%s: %v", id, axtest.Moves(rec))
	}
}

// A Go-style message whose client died between the publish and the create
// (no record ever comes) still runs: the worker creates the record after
// its wait.
func TestClaimCreatesTheRecordOfAClientThatDied(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.StartWorker(t, worker.Config{ID: "w", Concurrency: 4})
	publishGoStyle(t, b, "orphan")
	rec := b.WaitState(t, "orphan", kv.StateSucceeded)
	require.Equal(t, "publish", rec.Trail[0].Action, "%v", axtest.Moves(rec))
}
