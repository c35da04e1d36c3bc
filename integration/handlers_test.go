package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// storedErrorCap bounds an error as stored in a record, a trail move and a
// dead letter's Ax-Error header: issue 11 asks that they be cut (for
// example at 4 KiB); the bound leaves room for a note of the cut.
const storedErrorCap = 8 << 10

// record reads task id's record, nil if it cannot.
func (m *mesh) record(id string) *kv.Record {
	rec, _, err := storeGet(context.Background(), m.client.Store(), id)
	if err != nil {
		return nil
	}
	return rec
}

// describe summarizes a record for failure messages.
func describe(rec *kv.Record) string {
	if rec == nil {
		return "no record"
	}
	actions := map[string]int{}
	largest := 0
	for _, mv := range rec.Trail {
		actions[string(mv.To)+":"+mv.Action]++
		largest = max(largest, len(mv.Error))
	}
	return fmt.Sprintf("%s attempt %d of %d, lost %d, %d-byte last error %.120q; trail of %d moves %v, largest error %d bytes",
		rec.State, rec.Attempt, rec.MaxAttempts, rec.Lost, len(rec.LastError), rec.LastError, len(rec.Trail), actions, largest)
}

// Handlers that end their worker's process (os.Exit, as a fatal runtime
// error, an OOM kill or a cgo fault would) run at most MaxAttempts times:
// each death counts as a failed attempt, and the task then ends DEAD with a
// reason about its lost workers instead of killing worker after worker. A
// supervisor restarts each dead worker, as systemd or Kubernetes would.
//
// Fails at 2a2a6a4 (as at 54cd21a): 5 workers died in turn in 33 s and
// the record stayed RUNNING "attempt 1 of 2, lost 0", its trail 5 claims
// and 4 takeovers: a takeover gives the attempt back (issue 11 item 7).
func TestHandlerExits(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.workerArgs = []string{"--fault-types"}
	m.spawn()
	m.spawn()
	const attempts = 2
	ctx := context.Background()
	info, err := m.client.Submit(ctx, ax.TaskSpec{Type: "exit", MaxAttempts: attempts, Payload: []byte(`{"code":3}`)})
	require.NoError(t, err)

	deaths := 0
	start := time.Now()
	var rec *kv.Record
	for {
		rec = m.record(info.ID)
		if rec != nil && rec.State == kv.StateDead {
			break
		}
		deaths += m.restartExited(3)
		if deaths > attempts+2 || time.Since(start) > 3*time.Minute {
			t.Fatalf("after %d worker deaths in %s the task is %s", deaths, time.Since(start).Round(time.Second), describe(rec))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	// Buried: no worker dies of it any more, for three ack waits.
	for quiet := time.Now().Add(3 * faultAckWaitDuration(t)); time.Now().Before(quiet); time.Sleep(100 * time.Millisecond) {
		require.Zero(t, m.restartExited(3), "a worker died after the task was dead")
	}
	require.LessOrEqual(t, deaths, attempts, "at most one death per attempt: %s", describe(rec))
	require.Equal(t, deaths, rec.Lost, "each death counted as a lost attempt: %s", describe(rec))
	require.Contains(t, strings.ToLower(rec.LastError), "lost", "the reason names the lost workers: %s", describe(rec))
	m.requireDeadLetter(rec)
	t.Logf("handler exits: 1 task of %d attempts killed %d workers, then DEAD after %s: %q",
		attempts, deaths, took.Round(100*time.Millisecond), rec.LastError)
}

// restartExited replaces each worker that exited (with status code, which
// the test requires) by a new one, and returns how many it replaced.
func (m *mesh) restartExited(code int) int {
	m.t.Helper()
	n := 0
	for id, w := range m.workers {
		if !w.exited() {
			continue
		}
		require.Equal(m.t, code, w.cmd.ProcessState.ExitCode(), "worker %s exited:\n%s", id, w.output())
		m.deaths[id] = time.Now()
		delete(m.workers, id)
		m.spawn()
		n++
	}
	return n
}

// faultAckWaitDuration is [faultAckWait] as a duration.
func faultAckWaitDuration(t *testing.T) time.Duration {
	d, err := time.ParseDuration(faultAckWait)
	require.NoError(t, err)
	return d
}

// requireDeadLetter requires the dead letter of a DEAD record in AX_DLQ,
// with the task's id and its error, cut like the record's.
func (m *mesh) requireDeadLetter(rec *kv.Record) {
	m.t.Helper()
	ctx := context.Background()
	dlq, err := m.js.Stream(ctx, streams.DefaultNames().DLQStream())
	require.NoError(m.t, err)
	require.NotZero(m.t, rec.DLQSeq, "no dead letter: %s", describe(rec))
	msg, err := dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(m.t, err, "the dead letter of %s", rec.ID)
	require.Equal(m.t, rec.ID, msg.Header.Get(streams.HeaderTaskID))
	require.NotEmpty(m.t, msg.Header.Get(streams.HeaderError))
	require.LessOrEqual(m.t, len(msg.Header.Get(streams.HeaderError)), storedErrorCap, "the dead letter's Ax-Error is cut")
}

// A handler that panics fails its task permanently, with the panic as the
// reason; its worker stays up and runs the next task.
func TestHandlerPanics(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.workerArgs = []string{"--fault-types"}
	m.spawn()
	ctx := context.Background()
	var ids []string
	for range 3 {
		info, err := m.client.Submit(ctx, ax.TaskSpec{Type: "panic"})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	good := m.submitProbes(20, 1, 10)
	m.waitSucceeded(good, time.Minute, nil)
	for _, id := range ids {
		var rec *kv.Record
		require.Eventually(t, func() bool {
			rec = m.record(id)
			return rec != nil && rec.State == kv.StateDead
		}, time.Minute, 50*time.Millisecond, "panicking task %s: %s", id, describe(rec))
		require.Contains(t, rec.LastError, "panicked")
		require.Contains(t, rec.LastError, "panics by design")
		require.Equal(t, 1, rec.Attempt, "a panic is permanent: %s", describe(rec))
		m.requireDeadLetter(rec)
	}
	for id, w := range m.workers {
		require.False(t, w.exited(), "worker %s exited:\n%s", id, w.output())
	}
	t.Logf("handler panics: %d panicking tasks DEAD after 1 attempt with the panic as reason; %d other tasks succeeded on the same worker", len(ids), len(good))
}

// A handler that returns a huge error (1 MiB, or 64 KiB) still settles:
// RETRYING, then DEAD after its attempts (or DEAD at once if permanent),
// with the error cut where it is stored: the record, each trail move and
// the dead letter's Ax-Error header.
//
// Fails at 2a2a6a4 (as at 54cd21a): none is DEAD 90 s after its submit.
// The 1 MiB ones stay RUNNING at attempt 1, their trails 64 moves of
// claim and takeover (the record with the error does not fit in a KV
// value, so the failed attempt is never written; the message is
// redelivered and run again); the 64 KiB one stays RUNNING at attempt 2
// of 2, its 65,554-byte error stored whole, cycling the same way (issue 11
// item 10).
func TestHugeErrors(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.workerArgs = []string{"--fault-types"}
	m.spawn()
	ctx := context.Background()
	cases := []struct {
		name      string
		payload   string
		attempts  int
		retryable bool
	}{
		{"1MiB-retryable", `{"bytes":1048576}`, 2, true},
		{"1MiB-permanent", `{"bytes":1048576,"permanent":true}`, 3, false},
		{"64KiB-retryable", `{"bytes":65536}`, 2, true},
	}
	ids := map[string]string{}
	deadline := time.Now().Add(90 * time.Second) // for all of them
	for _, c := range cases {
		info, err := m.client.Submit(ctx, ax.TaskSpec{Type: "bigerror", MaxAttempts: c.attempts, Payload: []byte(c.payload)})
		require.NoError(t, err)
		ids[c.name] = info.ID
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := ids[c.name]
			var rec *kv.Record
			for rec = m.record(id); rec == nil || rec.State != kv.StateDead; rec = m.record(id) {
				if time.Now().After(deadline) {
					t.Fatalf("not DEAD 90 s after its submit: %s", describe(rec))
				}
				time.Sleep(100 * time.Millisecond)
			}
			start := strings.TrimPrefix(rec.LastError, "permanent: ") // worker.Permanent's mark
			require.True(t, strings.HasPrefix(start, "bigerror: task "+id), "the cut keeps the error's start: %.80q", rec.LastError)
			require.LessOrEqual(t, len(rec.LastError), storedErrorCap, "the record's error is cut: %s", describe(rec))
			retried := 0
			for _, mv := range rec.Trail {
				require.LessOrEqual(t, len(mv.Error), storedErrorCap, "every trail error is cut: %s", describe(rec))
				if mv.To == kv.StateRetrying {
					retried++
				}
			}
			if c.retryable {
				require.Equal(t, c.attempts-1, retried, "RETRYING after each attempt but the last: %s", describe(rec))
				require.Equal(t, c.attempts, rec.Attempt, describe(rec))
			} else {
				require.Zero(t, retried, "a permanent error is not retried: %s", describe(rec))
				require.Equal(t, 1, rec.Attempt, describe(rec))
			}
			m.requireDeadLetter(rec)
		})
	}
	for id, w := range m.workers {
		require.False(t, w.exited(), "worker %s exited:\n%s", id, w.output())
	}
}

// AX_DLQ unavailable (deleted) while a permanently failing task runs: its
// outcome is decided once, so its handler runs once, not at every
// redelivery; once AX_DLQ is back (provisioned again) the task ends DEAD
// with its real reason, and the trail blames no lapsed claim.
//
// Fails at 2a2a6a4 (as at 54cd21a): the handler ran 6 times in 8 s
// without AX_DLQ, the record RUNNING at attempt 1 of 3 after 5 takeovers:
// each failed dead-letter write naks the message with a 1 s delay, and
// each redelivery runs the handler again (issue 11 item 8).
func TestDLQOutage(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.spawn()
	ctx := context.Background()
	dlq := streams.DefaultNames().DLQStream()
	require.NoError(t, m.js.DeleteStream(ctx, dlq))
	info, err := m.client.Submit(ctx, ax.TaskSpec{Type: "probe", MaxAttempts: 3, Payload: []byte(`{"ms":10,"fail":99,"permanent":true}`)})
	require.NoError(t, err)
	runs := func() int { return len(readJournals(t, m.journal, nil).executions[info.ID]) }
	require.Eventually(t, func() bool { return runs() > 0 }, 30*time.Second, 50*time.Millisecond, "the task did not run")

	// Four ack waits without AX_DLQ.
	// An observation window, not a wait for an event: the runs are counted
	// over all of it.
	outage := 4 * faultAckWaitDuration(t)
	time.Sleep(outage)
	during := runs()
	rec := m.record(info.ID)
	require.Equal(t, 1, during, "the handler ran %d times in %s without AX_DLQ, the task %s", during, outage, describe(rec))

	runAx(t, "provision", "--server", m.url, "--ack-wait", faultAckWait)
	restored := time.Now()
	require.Eventually(t, func() bool {
		rec = m.record(info.ID)
		return rec != nil && rec.State == kv.StateDead
	}, time.Minute, 50*time.Millisecond, "the task was not buried once AX_DLQ was back: %s", describe(rec))
	buried := time.Since(restored)
	require.Equal(t, 1, runs(), "the handler ran again")
	require.Contains(t, rec.LastError, "planned failures", "the real reason: %s", describe(rec))
	for _, mv := range rec.Trail {
		require.NotContains(t, strings.ToLower(mv.Error), "lapsed", "the trail blames a lapsed claim: %s", describe(rec))
	}
	m.requireDeadLetter(rec)
	t.Logf("DLQ outage: %s without AX_DLQ, the failing handler ran once; buried %s after AX_DLQ was back, reason %q",
		outage, buried.Round(100*time.Millisecond), rec.LastError)
}
