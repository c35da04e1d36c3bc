package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A workflow as deployed, under both shipped permission files: a tenant's
// producer submits its document with `ax workflow submit`, the leader
// (ax scheduler) releases each task after its parents, the worker runs
// them, and the operator draws it with `ax workflow get`. A producer may
// not submit another tenant's workflow (its document's subject carries
// the tenant, as a task's does).
func TestWorkflowAsDeployed(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			workflowAsDeployed(t, file)
		})
	}
}

func workflowAsDeployed(t *testing.T, file string) {
	srv := startRoleServer(t, file)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	sched := startAxAs(t, url, "scheduler", "scheduler")
	w := startAxAs(t, url, "worker-1", "worker")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())

	doc := filepath.Join(t.TempDir(), "wf.json")
	require.NoError(t, os.WriteFile(doc, []byte(`{"id": "order-7", "tenant": "acme", "tasks": [
  {"name": "charge", "task": {"type": "echo"}},
  {"name": "ship",   "task": {"type": "sleep", "payload": "eyJtcyI6IDMwMH0="}, "after": ["charge"]},
  {"name": "mail",   "task": {"type": "echo"}, "after": ["charge"]},
  {"name": "done",   "task": {"type": "echo"}, "after": ["ship", "mail"]}]}`), 0o600))
	require.Equal(t, "order-7: 4 tasks", strings.TrimSpace(mustAxAs(t, url, "producer-acme", "workflow", "submit", doc)))
	var drawn string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, stderr, err := runAxAs(url, "operator", time.Minute, "workflow", "get", "order-7", "--tenant", "acme")
		assert.NoError(c, err, stderr)
		assert.Contains(c, out, "4 tasks: 4 SUCCEEDED")
		drawn = out
	}, 60*time.Second, 200*time.Millisecond)
	require.Regexp(t, `(?m)^  done\s+SUCCEEDED\s+echo\s+after ship, mail$`, drawn)
	require.Regexp(t, `(?m)^order-7\s+acme\s+SUCCEEDED\s+4\s+\S+\s+4 SUCCEEDED$`, mustAxAs(t, url, "operator", "workflow", "ls", "--tenant", "acme"))
	require.Contains(t, mustAxAs(t, url, "operator", "workflow", "cancel", "order-7", "--tenant", "acme"),
		"workflow order-7: 0 tasks cancelled (0 running, their workers told), 4 had ended")
	for _, name := range []string{"ship", "mail"} {
		parent := taskJSON(t, url, "acme", "order-7/charge")
		child := taskJSON(t, url, "acme", "order-7/"+name)
		require.False(t, child.StartedAt.Before(*parent.FinishedAt), "%s started before charge ended", name)
	}

	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})

	// Refused by the server (after the check that nothing else was).
	other := filepath.Join(t.TempDir(), "globex.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"id": "theirs", "tenant": "globex", "tasks": [{"name": "a", "task": {"type": "echo"}}]}`), 0o600))
	_, stderr, err := runAxAs(url, "producer-acme", 30*time.Second, "workflow", "submit", other)
	require.Error(t, err, "producer-acme submitted a workflow of globex")
	require.Contains(t, stderr, "producer-acme")
}

// taskSucceeded reports whether a task's record says SUCCEEDED, read as
// the operator (`ax task get --json`); a task released but not yet claimed
// has no record (the claim writes it), and is not.
func taskSucceeded(url, tenant, id string) bool {
	out, _, err := runAxAs(url, "operator", 30*time.Second, "task", "get", id, "--tenant", tenant, "--json")
	var rec kv.Record
	return err == nil && json.Unmarshal([]byte(out), &rec) == nil && rec.State == kv.StateSucceeded
}

// taskJSON reads a task's record as the operator (`ax task get --json`).
func taskJSON(t *testing.T, url, tenant, id string) *kv.Record {
	t.Helper()
	var rec kv.Record
	out := mustAxAs(t, url, "operator", "task", "get", id, "--tenant", tenant, "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
	return &rec
}

// ax workflow pause and resume as deployed, under both shipped permission
// files: the operator pauses a workflow while its first task runs, the
// task finishes and its child is not released until the resume; a second
// resume changes nothing; a tenant's producer may not pause a workflow,
// its tenant's or another's (the management API is the operator's). The
// task held by a DEAD parent says so in `ax workflow get`, and a workflow
// with nothing left to run cannot be paused.
func TestWorkflowPauseAsDeployed(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			workflowPauseAsDeployed(t, file)
		})
	}
}

func workflowPauseAsDeployed(t *testing.T, file string) {
	srv := startRoleServer(t, file)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sched := startAxAs(t, url, "scheduler", "scheduler", "--metrics-addr", metricsAddr)
	w := startAxAs(t, url, "worker-1", "worker")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	require.Eventually(t, func() bool { return strings.Contains(sched.output(), "admin_started") || sched.exited() },
		30*time.Second, 50*time.Millisecond, "ax scheduler's management API did not start:\n%s", sched.output())
	// ls, the workflow.get reply the dashboard shows, and ax_workflows on
	// the scheduler's /metrics each say whether the workflow is paused.
	operator, _ := srv.ConnectAs("operator")
	requireShownAs := func(state string) {
		t.Helper()
		ls := mustAxAs(t, url, "operator", "workflow", "ls", "--tenant", "acme")
		require.Regexp(t, `(?m)^order-9\s+acme\s+`+state+`\s`, ls)
		var reply admin.WorkflowGetReply
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, admin.NewClient(operator, streams.Names{}).Call(ctx, admin.VerbWorkflowGet,
			admin.WorkflowRequest{ID: "order-9", Tenant: "acme"}, &reply))
		require.Equal(t, state, reply.State)
		require.Equal(t, state == "PAUSED", reply.Paused)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := http.Get("http://" + metricsAddr + "/metrics")
			if !assert.NoError(c, err) {
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			for _, s := range []string{"RUNNING", "PAUSED", "FAILED"} {
				want := 0
				if s == state {
					want = 1
				}
				assert.Contains(c, string(body), fmt.Sprintf("ax_workflows{state=%q} %d\n", strings.ToLower(s), want))
			}
		}, 30*time.Second, 200*time.Millisecond, "ax_workflows on the scheduler's /metrics")
	}

	doc := filepath.Join(t.TempDir(), "wf.json")
	require.NoError(t, os.WriteFile(doc, []byte(`{"id": "order-9", "tenant": "acme", "tasks": [
  {"name": "slow",  "task": {"type": "sleep", "payload": "eyJtcyI6IDIwMDB9"}},
  {"name": "after", "task": {"type": "echo"}, "after": ["slow"]},
  {"name": "bad",   "task": {"type": "fail"}},
  {"name": "held",  "task": {"type": "echo"}, "after": ["bad"]}]}`), 0o600))
	require.Equal(t, "order-9: 4 tasks", strings.TrimSpace(mustAxAs(t, url, "producer-acme", "workflow", "submit", doc)))
	require.Equal(t, "workflow order-9: paused", strings.TrimSpace(mustAxAs(t, url, "operator", "workflow", "pause", "order-9", "--tenant", "acme")))
	require.Contains(t, mustAxAs(t, url, "operator", "workflow", "pause", "order-9", "--tenant", "acme"), "workflow order-9: paused already (since ")
	requireShownAs("PAUSED")

	require.Eventually(t, func() bool { return taskSucceeded(url, "acme", "order-9/slow") },
		60*time.Second, 200*time.Millisecond)
	time.Sleep(2 * time.Second) // the leader's retry tick, twice
	drawn := mustAxAs(t, url, "operator", "workflow", "get", "order-9", "--tenant", "acme")
	require.Regexp(t, `(?m)^  after\s+WAITING\s+echo\s+after slow  \(held: the workflow is paused\)$`, drawn, "a task of a paused workflow was released")
	require.Contains(t, drawn, "workflow order-9 (tenant acme) (paused): 4 tasks")
	require.Regexp(t, `(?m)^  held\s+WAITING\s+echo\s+after bad  \(held: parent bad is DEAD: replay it \(ax dlq replay\) to go on\)$`, drawn)

	require.Equal(t, "workflow order-9: resumed", strings.TrimSpace(mustAxAs(t, url, "operator", "workflow", "resume", "order-9", "--tenant", "acme")))
	require.Equal(t, "workflow order-9: not paused", strings.TrimSpace(mustAxAs(t, url, "operator", "workflow", "resume", "order-9", "--tenant", "acme")))
	require.Eventually(t, func() bool { return taskSucceeded(url, "acme", "order-9/after") },
		60*time.Second, 200*time.Millisecond)
	after := taskJSON(t, url, "acme", "order-9/after")
	require.Equal(t, "released by the success of parent slow; held while the workflow was paused, released at its resume", after.Trail[0].Note)
	requireShownAs("FAILED") // resumed: held by its DEAD task only

	_, stderr, err := runAxAs(url, "operator", 30*time.Second, "workflow", "pause", "order-9", "--tenant", "acme")
	require.Error(t, err)
	require.Contains(t, stderr, "workflow order-9 of tenant acme has ended (FAILED): nothing is left to pause")

	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})

	// Refused by the server (after the check that nothing else was).
	for _, producer := range []string{"producer-acme", "producer-globex"} {
		_, stderr, err := runAxAs(url, producer, 30*time.Second, "workflow", "pause", "order-9", "--tenant", "acme")
		require.Error(t, err, "%s paused a workflow", producer)
		require.Contains(t, stderr, "ax.admin.workflow.pause", "%s: %s", producer, stderr)
	}
}
