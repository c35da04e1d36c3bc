package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ax submit --batch FILE, run as producer-acme with the shipped
// permissions (both files), is all or nothing: a file with one bad line
// submits none of its good ones and names the line (exit 1); a good file
// runs every task; a line of another tenant is refused by the server and
// nothing is stored; a batch whose acknowledgement cannot be read exits 3
// and was stored whole. The scheduler's /metrics count the workflow
// beside it by state, the batch left out.
func TestSubmitBatchAsDeployed(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			submitBatchAsDeployed(t, file)
		})
	}
}

func submitBatchAsDeployed(t *testing.T, file string) {
	srv := startRoleServer(t, file)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sched := startAxAs(t, url, "scheduler", "scheduler", "--metrics-addr", metricsAddr)
	w := startAxAs(t, url, "worker-1", "worker")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	_, js := srv.ConnectAs("scheduler")
	documents := func() uint64 {
		stream, err := js.Stream(context.Background(), "AX_WORKFLOWS")
		require.NoError(t, err)
		return stream.CachedInfo().State.Msgs
	}
	write := func(name, text string) string {
		path := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		return path
	}
	exitCode := func(err error) int {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		return exit.ExitCode()
	}

	// A bad line (its priority) among good ones: nothing is submitted.
	bad := write("bad.jsonl", `{"id": "b-1", "type": "echo", "tenant": "acme"}
{"id": "b-2", "type": "echo", "tenant": "acme"}
{"id": "b-3", "type": "echo", "tenant": "acme", "priority": "p9"}
`)
	_, stderr, err := runAxAs(url, "producer-acme", time.Minute, "submit", "--batch", bad)
	require.Error(t, err)
	require.Zero(t, documents(), "the bad file stored a document")
	require.Equal(t, 1, exitCode(err), stderr)
	require.Contains(t, stderr, "bad.jsonl:3: invalid task: Priority")
	require.Contains(t, stderr, "nothing submitted")
	require.NotContains(t, stderr, "bad.jsonl:1")
	mixed := write("mixed.jsonl", `{"id": "m-1", "type": "echo", "tenant": "acme"}
{"id": "m-2", "type": "echo", "tenant": "globex"}
{"id": "m-1", "type": "echo", "tenant": "acme"}
`)
	_, stderr, err = runAxAs(url, "producer-acme", time.Minute, "submit", "--batch", mixed)
	require.Equal(t, 1, exitCode(err), stderr)
	require.Contains(t, stderr, `mixed.jsonl:2: tenant "globex", line 1's is "acme": a batch is of one tenant`)
	require.Contains(t, stderr, `mixed.jsonl:3: id "m-1" is line 1's too`)
	_, stderr, err = runAxAs(url, "producer-acme", time.Minute, "submit", "--batch", mixed, "--priority", "p1")
	require.Equal(t, 2, exitCode(err), stderr)
	require.Contains(t, stderr, "--priority set the fields of one task; with --batch each line of the file sets its own")

	// A good file: every task runs.
	good := write("good.jsonl", `{"id": "g-1", "type": "echo", "tenant": "acme", "payload": "aGk="}

{"id": "g-2", "type": "sleep", "tenant": "acme", "payload": "eyJtcyI6IDUwfQ==", "priority": "p1"}
{"id": "g-3", "type": "echo", "tenant": "acme"}
`)
	require.Equal(t, "g-1\ng-2\ng-3\n", mustAxAs(t, url, "producer-acme", "submit", "--batch", good))
	for _, id := range []string{"g-1", "g-2", "g-3"} {
		waitSucceeded(t, url, "acme", id)
	}
	out := mustAxAs(t, url, "producer-acme", "submit", "--batch", write("one.jsonl", `{"id": "j-1", "type": "echo", "tenant": "acme"}`), "--json")
	var infos []ax.TaskInfo
	require.NoError(t, json.Unmarshal([]byte(out), &infos), out)
	require.Len(t, infos, 1)
	require.Equal(t, "j-1", infos[0].ID)
	require.Equal(t, "acme", infos[0].Tenant)
	waitSucceeded(t, url, "acme", "j-1")
	require.Equal(t, uint64(2), documents(), "one document per batch; the bad files stored none")

	// The scheduler's metrics, scraped as deployed, count a workflow by
	// state and leave the batch out.
	doc := write("wf.json", `{"id": "order-8", "tenant": "acme", "tasks": [{"name": "a", "task": {"type": "echo"}},
  {"name": "b", "task": {"type": "echo"}, "after": ["a"]}]}`)
	mustAxAs(t, url, "producer-acme", "workflow", "submit", doc)
	waitSucceeded(t, url, "acme", "order-8/b")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if !assert.NoError(c, err) {
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		assert.Contains(c, string(body), "ax_workflows{state=\"succeeded\"} 1\n")
		assert.Contains(c, string(body), "ax_workflows{state=\"running\"} 0\n")
	}, 30*time.Second, 200*time.Millisecond, "ax_workflows on the scheduler's /metrics")
	for _, id := range []string{"b-1", "b-2", "b-3", "m-1", "m-2"} { // had they been stored, they would have run by now
		_, _, err := runAxAs(url, "operator", time.Minute, "task", "get", id, "--tenant", "acme")
		require.Error(t, err, "task %s of the bad file was stored", id)
	}

	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})

	// Another tenant's batch: the server refuses the publish; not stored.
	other := write("globex.jsonl", `{"id": "o-1", "type": "echo", "tenant": "globex"}`+"\n")
	_, stderr, err = runAxAs(url, "producer-acme", 30*time.Second, "submit", "--batch", other)
	require.Error(t, err)
	require.Equal(t, 1, exitCode(err), stderr)
	require.Contains(t, stderr, "producer-acme")
	require.NotContains(t, stderr, "may be stored")
	require.Equal(t, uint64(3), documents())

	if file != permissionsFile {
		return
	}
	// The acknowledgement cannot be read (its reply inbox refused): exit
	// 3, and the batch was stored whole and runs.
	startAxAs(t, url, "scheduler", "scheduler")
	startAxAs(t, url, "worker-1", "worker")
	unacked := write("unacked.jsonl", `{"id": "u-1", "type": "echo", "tenant": "acme"}
{"id": "u-2", "type": "echo", "tenant": "acme"}
`)
	_, stderr, err = runAxAs(url, "producer-acme", time.Minute, "submit", "--batch", unacked, "--inbox-prefix", "_INBOX.service")
	require.Error(t, err)
	require.Equal(t, 3, exitCode(err), stderr)
	require.Contains(t, stderr, "submitting the file again is safe: every line sets its id")
	for _, id := range []string{"u-1", "u-2"} {
		waitSucceeded(t, url, "acme", id)
	}
}

// waitSucceeded waits until the operator reads tenant's task id SUCCEEDED.
func waitSucceeded(t *testing.T, url, tenant, id string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, _, err := runAxAs(url, "operator", time.Minute, "task", "get", id, "--tenant", tenant, "--json")
		var rec kv.Record
		if assert.NoError(c, err) && assert.NoError(c, json.Unmarshal([]byte(out), &rec)) {
			assert.Equal(c, kv.StateSucceeded, rec.State)
		}
	}, 60*time.Second, 200*time.Millisecond, "task %s of %s", id, tenant)
}
