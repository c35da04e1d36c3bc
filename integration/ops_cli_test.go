package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/ax-mesh/ax/internal/axtest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// axFail runs an ax command that must fail and returns its stderr.
func axFail(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, axBinary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.Error(t, cmd.Run(), "ax %s should fail", strings.Join(args, " "))
	return stderr.String()
}

func submitCLI(t *testing.T, url string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(runAx(t, append([]string{"submit", "--server", url}, args...)...))
}

// With workers: cancel a running task, dead letters, stats, workers, metrics.
func TestOperatorCLIWithWorkers(t *testing.T) {
	t.Parallel()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dev := startDev(t, "--metrics-addr", metricsAddr)
	s := dev.url

	long := submitCLI(t, s, "sleep", "--payload", `{"ms":30000}`, "--tenant", "acme")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Contains(c, runAx(c, "task", "get", long, "--server", s), "RUNNING") },
		30*time.Second, 50*time.Millisecond)
	out := runAx(t, "task", "cancel", long, "--server", s)
	require.Contains(t, out, long+" of acme: RUNNING -> CANCELLED (cancel")
	require.Contains(t, out, "worker notified")
	require.Contains(t, runAx(t, "task", "trail", long, "--server", s), "cancel")
	require.Contains(t, axFail(t, "task", "cancel", long, "--server", s), "409: task "+long+" (tenant acme) is CANCELLED")

	dead := submitCLI(t, s, "fail", "--tenant", "acme")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Contains(c, runAx(c, "task", "get", dead, "--server", s), "DEAD") },
		30*time.Second, 50*time.Millisecond)
	ls := runAx(t, "dlq", "ls", "--server", s, "--type", "fail")
	require.Contains(t, ls, dead)
	require.Contains(t, ls, "fails by design")
	require.Contains(t, ls, "1 of 1 dead letters")
	var list admin.DLQListReply
	require.NoError(t, json.Unmarshal([]byte(runAx(t, "dlq", "ls", "--server", s, "--json")), &list))
	require.Len(t, list.Letters, 1)
	require.Contains(t, runAx(t, "dlq", "replay", dead, "--server", s), "replayed 1: "+dead)
	// It fails by design again: a new dead letter, and the trail keeps both deaths.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1, strings.Count(runAx(c, "task", "trail", dead, "--server", s), "replay"))
		assert.Contains(c, runAx(c, "task", "get", dead, "--server", s), "DEAD")
	}, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, runAx(t, "dlq", "replay", "--tenant", "acme", "--dry-run", "--server", s), "would replay (dry run) 1: "+dead)

	for range 5 {
		submitCLI(t, s, "echo", "--payload", "hi", "--priority", "p1")
	}
	var stats admin.StatsReply
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := axOutput("stats", "--server", s, "--json")
		if assert.NoError(c, err) && assert.NoError(c, json.Unmarshal([]byte(out), &stats)) {
			assert.GreaterOrEqual(c, stats.States[kv.StateSucceeded], 5)
		}
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, 5, stats.Buckets[1].Samples)
	require.GreaterOrEqual(t, stats.Buckets[1].RecommendedTimeout, kv.Duration(time.Second))
	table := runAx(t, "stats", "--server", s)
	require.Regexp(t, `(?m)^BUCKET\s+DEPTH\s+CAPACITY\s+IN FLIGHT`, table)
	require.Regexp(t, `(?m)^p1\s+0\s+\d+\s+0\s`, table)
	require.Contains(t, table, "1 dead letters")
	require.Regexp(t, `(?m)^TYPE\s+DONE\s+DEAD\s+RETRIED\s+TIMED OUT\s+P50\s+P99\s+TIMEOUT SET\s+TIMEOUT$`, table)
	require.Regexp(t, `(?m)^echo\s+5\s+0\s+0\s+0\s.*\s1s$`, table)
	require.Equal(t, "echo", stats.Types[0].Type)
	require.Equal(t, 5, stats.Types[0].Succeeded)
	require.Contains(t, runAx(t, "workers", "--server", s), "workers")

	body := scrape(t, metricsAddr)
	require.Contains(t, string(body), `ax_tasks_total{outcome="succeeded",priority="p1",tenant="default",type="echo"} 5`)
	require.Contains(t, string(body), `ax_tasks_total{outcome="cancelled",priority="p2",tenant="acme",type="sleep"} 1`)
	require.Contains(t, string(body), `ax_bucket_depth{priority="p1"} 0`)
	require.Contains(t, string(body), "ax_dlq_messages 1")
	require.Contains(t, string(body), "ax_task_run_seconds_bucket")
	// ax_leader under ax dev: TestDevReportsItsLeader (it turns 1 once the leader is elected).
}

// Without workers tasks stay READY: pause, resume, reprioritize, batch cancel.
func TestOperatorCLIOnWaitingTasks(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	s := dev.url
	a := submitCLI(t, s, "echo", "--tenant", "acme", "--priority", "p3")
	b := submitCLI(t, s, "echo", "--tenant", "acme", "--priority", "p3")
	c := submitCLI(t, s, "sleep", "--tenant", "globex")

	require.Contains(t, runAx(t, "task", "pause", a, "--server", s), a+" of acme: READY -> PAUSED (pause")
	// Submitted without an id: no record until the pause wrote it, and its
	// first message is generation 0.
	require.Contains(t, runAx(t, "task", "resume", a, "--server", s), "READY (resume, generation 1, p3); message re-dispatched")
	require.Contains(t, runAx(t, "task", "reprioritize", a, "p0", "--server", s), "READY (reprioritize, generation 2, p0)")
	var rec kv.Record
	require.NoError(t, json.Unmarshal([]byte(runAx(t, "task", "get", a, "--server", s, "--json")), &rec))
	require.Equal(t, 0, rec.Priority)
	require.Contains(t, axFail(t, "task", "reprioritize", a, "p9", "--server", s), "p0..p4")
	require.Contains(t, axFail(t, "task", "get", "no-such-task", "--server", s), "404: get task no-such-task: unknown task")
	require.Contains(t, axFail(t, "tasks", "cancel", "--server", s), "400: tasks.cancel needs a filter")
	require.Contains(t, axFail(t, "tasks", "cancel", "--state", "done", "--server", s), "unknown state")

	require.Contains(t, runAx(t, "tasks", "cancel", "--tenant", "acme", "--dry-run", "--server", s), "2 tasks match (dry run: nothing cancelled)")
	require.Contains(t, runAx(t, "tasks", "cancel", "--tenant", "acme", "--state", "ready", "--server", s), "2 tasks match, 2 cancelled")
	require.Contains(t, runAx(t, "task", "get", b, "--server", s), "CANCELLED")
	require.Contains(t, runAx(t, "task", "get", c, "--server", s), "READY")

	require.Contains(t, axFail(t, "task", "pause", "raw-7", "--unseen", "--server", s), `400: task raw-7 has no record: to act on it before a worker sees it, give its "tenant"`)
	require.Contains(t, runAx(t, "task", "pause", "raw-7", "--unseen", "--tenant", "acme", "--server", s), "raw-7 of acme: (new record) -> PAUSED (pause")

	// A task id belongs to its tenant: with the same id in two tenants, a
	// verb on the id alone names both and asks for the tenant.
	submitCLI(t, s, "echo", "--tenant", "acme", "--id", "twice")
	submitCLI(t, s, "echo", "--tenant", "globex", "--id", "twice")
	require.Contains(t, axFail(t, "task", "get", "twice", "--server", s), "409: task id twice is ambiguous: tasks of 2 tenants have it (acme, globex)")
	require.Contains(t, runAx(t, "task", "cancel", "twice", "--tenant", "globex", "--server", s), "twice of globex: READY -> CANCELLED")
	require.Contains(t, runAx(t, "task", "get", "twice", "--tenant", "acme", "--server", s), "READY")
}

// ax scheduler serves the management API and metrics; ax worker and ax
// scheduler log console lines, as ax dev does (--log-format json: see
// TestOneSyntax).
func TestSchedulerAndWorkerProcesses(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	schedMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sched := startAx(t, "scheduler", "--server", dev.url, "--metrics-addr", schedMetrics)
	workerMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	wk := startAx(t, "worker", "--server", dev.url, "--metrics-addr", workerMetrics, "--id", "cli-worker")
	require.Eventually(t, func() bool {
		return strings.Contains(sched.output(), "\tINFO\tscheduler.admin\t") && strings.Contains(sched.output(), "\tadmin_started\t") &&
			strings.Contains(wk.output(), "\tworker_started\t")
	}, 30*time.Second, 50*time.Millisecond, "scheduler:\n%s\nworker:\n%s", sched.output(), wk.output())
	require.Contains(t, sched.output(), "management API on ax.admin.>")

	// Two instances of the service answer discovery.
	var infos int
	sub, err := dev.nc.SubscribeSync(dev.nc.NewRespInbox())
	require.NoError(t, err)
	require.NoError(t, dev.nc.PublishRequest("$SRV.PING.ax", sub.Subject, nil))
	for {
		if _, err := sub.NextMsg(time.Second); err != nil {
			break
		}
		infos++
	}
	require.Equal(t, 2, infos, "ax dev and ax scheduler both serve the API")

	id := submitCLI(t, dev.url, "echo", "--payload", "hi", "--tenant", "acme")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, runAx(c, "task", "get", id, "--server", dev.url), "SUCCEEDED")
	},
		30*time.Second, 50*time.Millisecond)
	require.Contains(t, scrape(t, workerMetrics), `ax_tasks_total{outcome="succeeded",priority="p2",tenant="acme",type="echo"} 1`)
	require.Contains(t, scrape(t, schedMetrics), "ax_leader 0")
}

// scrape returns the metrics text a process serves on addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	return axtest.Scrape(t, "http://"+addr+"/metrics")
}
