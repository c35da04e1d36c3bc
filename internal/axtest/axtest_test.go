package axtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakOptions()...)
}

// fatalRecorder is a test whose Fatalf is kept instead of ending it.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

// A wait that gives up says which task, what it waited for and for how
// long, and shows the record it read last with its trail, each move with
// its action; a task without a record says so with the read's error.
func TestWaitStateFailureShowsTheTrail(t *testing.T) {
	t.Parallel()
	b := axtest.Fast(t)
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{ID: "stuck", Type: "email", Priority: ax.P2})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateReady)
	require.Equal(t, []string{">READY"}, axtest.Moves(rec))

	r := &fatalRecorder{TB: t}
	require.Nil(t, axtest.WaitState(r, axtest.StoreRead(b.Store), info.ID, 100*time.Millisecond, kv.StateSucceeded))
	require.Contains(t, r.fatal, "task stuck: not SUCCEEDED within 100ms")
	require.Contains(t, r.fatal, "last read: READY, attempt 0")
	require.Regexp(t, `trail:\n  \d\d:\d\d:\d\d\.\d{3} >READY action="submit"`, r.fatal)

	r = &fatalRecorder{TB: t}
	axtest.WaitState(r, axtest.StoreRead(b.Store), "absent", 50*time.Millisecond, kv.StateReady, kv.StateRunning)
	require.Contains(t, r.fatal, "task absent: not [READY RUNNING] within 50ms\nno record read\nlast read error: 0 tasks have id absent")
}

// StartWorker runs the built-in types by default and StartLeader leads;
// a task submitted runs to SUCCEEDED.
func TestBundleRunsATask(t *testing.T) {
	t.Parallel()
	b := axtest.Fast(t)
	b.StartLeader(t, scheduler.Config{}).WaitLeading(t)
	b.StartWorker(t, worker.Config{Shards: axtest.AllShards()})
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "echo", Payload: []byte("x")})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
}
