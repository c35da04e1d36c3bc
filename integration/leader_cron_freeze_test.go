package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Issue 12.6: a leader frozen past its lease acts once more when it
// resumes, unless every write checks the lease first. Each round adds a
// cron job firing every 3 s, freezes the leader (SIGSTOP) right after the
// job's first fire, removes the job, and resumes the leader (SIGCONT) once
// another has taken over and the job's next time has passed during the
// freeze. The removed job must not fire again: the new leader never saw it,
// and the resumed one wakes with the job still in memory and its expired
// cron timer racing the cancel of its lapsed lease. Neither compare-and-set
// nor de-duplication can absorb such a fire: the job's record is gone (only
// the write of its last time fails), and nobody else submitted that time's
// task id. Before every leader write checked the lease (commit 54cd21a),
// the removed job fired again, and its task ran, in 3 to 7 rounds of 10.
func TestFrozenLeaderFiresNoRemovedCronJob(t *testing.T) {
	t.Parallel()
	const rounds = 10
	url, js, schedulers := startSchedulers(t)
	startAx(t, "worker", "--server", url, "--id", "w1", "--ack-wait", faultAckWait,
		"--probe-journal", filepath.Join(t.TempDir(), "w1.jsonl"))
	ctx := context.Background()
	leader := func() string { return leaderOf(js) }
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)

	// Every cron task submitted, by job: the scheduled times (unix seconds)
	// its ids name ("cron-<name>-<unix>-<secret>").
	tasks, err := js.KeyValue(ctx, "AX_TASKS")
	require.NoError(t, err)
	watch, err := tasks.WatchAll(ctx, jetstream.UpdatesOnly())
	require.NoError(t, err)
	var firesMu sync.Mutex
	fired := map[string]map[int64]string{} // job -> time -> task id
	go func() {
		for e := range watch.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			ref, err := kv.ParseKey(e.Key())
			if err != nil {
				continue
			}
			rest, ok := strings.CutPrefix(ref.ID, "cron-")
			if !ok {
				continue
			}
			name, rest, _ := strings.Cut(rest, "-")
			unix, _, _ := strings.Cut(rest, "-")
			at, err := strconv.ParseInt(unix, 10, 64)
			if err != nil {
				continue
			}
			firesMu.Lock()
			if fired[name] == nil {
				fired[name] = map[int64]string{}
			}
			fired[name][at] = ref.ID
			firesMu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = watch.Stop() })
	fires := func(name string) []int64 {
		firesMu.Lock()
		defer firesMu.Unlock()
		var out []int64
		for at := range fired[name] {
			out = append(out, at)
		}
		slices.Sort(out)
		return out
	}

	addJob := func(round int) string {
		name := fmt.Sprintf("gone_%d", round)
		_, err := client.AddCron(ctx, ax.CronJob{Name: name, Spec: "@every 3s",
			Task: ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":1}`)}})
		require.NoError(t, err)
		return name
	}
	firsts := make([]int64, rounds)
	name := addJob(0)
	for round := range rounds {
		require.Eventually(t, func() bool {
			f := fires(name)
			if len(f) > 0 {
				firsts[round] = f[0]
			}
			return len(f) > 0
		}, 15*time.Second, 2*time.Millisecond, "job %s never fired", name)

		// Right after its first fire: freeze the leader, then remove the
		// job. Its next time (first + 3 s) comes while the leader is
		// frozen, after its lease has lapsed (TTL 2 s, renewed every 1 s).
		old := leader()
		require.NotEmpty(t, old)
		schedulers[old].signal(t, syscall.SIGSTOP)
		frozen := time.Now()
		require.NoError(t, client.RemoveCron(ctx, name))
		t.Logf("round %d: job %s fired at %d, removed %s later with %s frozen", round, name, firsts[round],
			time.Since(time.Unix(firsts[round], 0)).Round(time.Millisecond), old)
		require.Eventually(t, func() bool { next := leader(); return next != "" && next != old }, 15*time.Second, 10*time.Millisecond)
		if round+1 < rounds {
			name = addJob(round + 1) // the new leader fires it first, ~3 s from now
		}
		resume := frozen.Add(4 * time.Second)
		if due := time.Unix(firsts[round]+3, 0).Add(500 * time.Millisecond); due.After(resume) {
			resume = due
		}
		time.Sleep(time.Until(resume))
		schedulers[old].signal(t, syscall.SIGCONT) // its expired timers fire at once
	}
	time.Sleep(2 * time.Second)

	stale := 0
	for round := range rounds {
		name := fmt.Sprintf("gone_%d", round)
		f := fires(name)
		after := f[slices.Index(f, firsts[round])+1:]
		for _, at := range after {
			firesMu.Lock()
			id := fired[name][at]
			firesMu.Unlock()
			state := "unknown"
			if rec, _, err := storeGet(ctx, client.Store(), id); err == nil {
				state = string(rec.State)
			}
			t.Logf("job %s: fired at %d, removed, then fired for %d: task %s is %s", name, firsts[round], at, id, state)
		}
		stale += len(after)
	}
	require.Zero(t, stale, "removed cron jobs fired again after a frozen leader resumed")
	t.Logf("%d rounds: a leader frozen 4 s (lease TTL 2 s) past a removed job's next time; fires after the removal: %d", rounds, stale)
}
