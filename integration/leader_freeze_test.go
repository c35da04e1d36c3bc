package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// Issue 12.6: SIGSTOP the leader while aging lifts a backlog, cron fires
// every second and delayed tasks come due; another scheduler takes over;
// SIGCONT the old one, whose timers and loops wake at once. Every write of
// a leader checks the lease synchronously first (Elector.Held), so the
// resumed leader writes nothing: no task runs twice, none is lost, no cron
// time is missed or doubled.
func TestLeaderFrozenAndResumed(t *testing.T) {
	t.Parallel()
	url, js, schedulers := startSchedulers(t, "--aging-threshold", "1s")
	journal := t.TempDir()
	for _, id := range []string{"w1", "w2"} {
		startAx(t, "worker", "--server", url, "--id", id, "--ack-wait", faultAckWait, "--concurrency", "2",
			"--probe-journal", filepath.Join(journal, id+".jsonl"))
	}
	ctx := context.Background()
	leader := func() string { return leaderOf(js) }
	require.Eventually(t, func() bool { return leader() != "" }, 30*time.Second, 50*time.Millisecond)

	runAx(t, "cron", "add", "tick", "@every 1s", "--type", "probe", "--payload", `{"ms":1}`, "--server", url)
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	start := time.Now()
	var delayed, backlog []string
	for i := range 100 {
		info, err := client.Submit(ctx, ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":1}`),
			RunAt: start.Add(3*time.Second + time.Duration(i)*60*time.Millisecond)})
		require.NoError(t, err)
		delayed = append(delayed, info.ID)
	}
	// A P4 backlog of ~10 s of work for 4 slots: aging lifts it meanwhile.
	tasks := make([]ax.TaskSpec, 1000)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "probe", Priority: ax.P4, Payload: []byte(`{"ms":40}`)}
	}
	infos, err := client.SubmitBatch(ctx, tasks)
	require.NoError(t, err)
	for _, info := range infos {
		backlog = append(backlog, info.ID)
	}

	// Every pressure report, in order, by its writer: a blind put, so a
	// resumed leader that still wrote one would show here.
	board, err := js.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	watch, err := board.Watch(ctx, control.PressureKey, jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = watch.Stop() }()
	var writersMu sync.Mutex
	var writers []string
	go func() {
		for e := range watch.Updates() {
			var p ax.Pressure
			if e != nil && json.Unmarshal(e.Value(), &p) == nil {
				writersMu.Lock()
				writers = append(writers, p.Leader)
				writersMu.Unlock()
			}
		}
	}()

	// Freeze the leader while delayed tasks come due, cron fires and aging
	// lifts; resume it after another has taken over.
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	old := leader()
	require.NotEmpty(t, old)
	schedulers[old].signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	var next string
	require.Eventually(t, func() bool { next = leader(); return next != "" && next != old }, 30*time.Second, 10*time.Millisecond)
	time.Sleep(2 * time.Second) // the new leader acts: aging, releases, fires
	schedulers[old].signal(t, syscall.SIGCONT)
	resumed := time.Now()

	m := &mesh{t: t, js: js, client: client}
	all := append(slices.Clone(delayed), backlog...)
	m.waitSucceeded(all, 3*time.Minute, nil) // lost 0: every task SUCCEEDED
	waitCronFires(t, client, time.Second, 3) // a few cron fires after the resume
	// Once the new leader has reported, the resumed one writes nothing:
	// every leader write is preceded by a synchronous lease check.
	// (Without that check the resumed leader's expired ticker could beat the
	// cancel of its lapsed lease and publish one more report; in 2 runs with
	// the check disabled it did not, so this is a guard, not a regression
	// test that fails at 54cd21a.)
	writersMu.Lock()
	stale := 0
	seenNext := false
	for _, w := range writers {
		seenNext = seenNext || w == next
		if seenNext && w == old {
			stale++
		}
	}
	t.Logf("pressure reports: %d in all, %d by the resumed leader after the new one's first", len(writers), stale)
	require.Zero(t, stale, "reports written by the resumed leader %s after %s took over: %v", old, next, writers)
	writersMu.Unlock()

	runAx(t, "cron", "rm", "tick", "--server", url)

	bucket, err := js.KeyValue(ctx, "AX_TASKS")
	require.NoError(t, err)
	keys, err := bucket.ListKeys(ctx)
	require.NoError(t, err)
	var fires []int64
	var cronIDs []string
	for key := range keys.Keys() {
		ref, err := kv.ParseKey(key)
		if err != nil {
			continue
		}
		k := ref.ID
		if rest, ok := strings.CutPrefix(k, "cron-tick-"); ok { // cron-tick-<unix>-<secret>
			unix, _, _ := strings.Cut(rest, "-")
			v, err := strconv.ParseInt(unix, 10, 64)
			require.NoError(t, err)
			fires = append(fires, v)
			cronIDs = append(cronIDs, k)
		}
	}
	slices.Sort(fires)
	require.Less(t, fires[0], frozen.Unix(), "fires before the freeze")
	require.Greater(t, fires[len(fires)-1], resumed.Unix()+1, "fires after the resume")
	for i := 1; i < len(fires); i++ {
		require.Equal(t, int64(1), fires[i]-fires[i-1], "cron times missed or doubled between %d and %d", fires[i-1], fires[i])
	}
	m.waitSucceeded(cronIDs, time.Minute, nil)

	j := readJournals(t, journal, nil)
	aged := 0
	for _, id := range all {
		require.Len(t, j.executions[id], 1, "task %s ran %d times", id, len(j.executions[id]))
	}
	for _, id := range cronIDs {
		require.Len(t, j.executions[id], 1, "cron task %s ran %d times", id, len(j.executions[id]))
	}
	for _, id := range backlog {
		rec, _, err := storeGet(ctx, client.Store(), id)
		require.NoError(t, err)
		if rec.Priority < 4 {
			aged++
		}
	}
	require.Positive(t, aged, "aging was in flight")
	t.Logf("leader %s frozen %s, %s led meanwhile; after the resume: %d delayed, %d backlog (%d aged) and %d cron tasks; every one SUCCEEDED (lost 0), each ran once (ran twice 0); cron times missed or doubled 0",
		old, resumed.Sub(frozen).Round(time.Millisecond), next, len(delayed), len(backlog), aged, len(cronIDs))
}
