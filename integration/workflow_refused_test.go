package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/stretchr/testify/require"
)

// `ax workflow submit FILE` as a tenant's producer refuses a cycle, a
// missing parent, a task with 10,000 parents and a document larger than
// MaxWorkflowBytes, each with an error naming what is wrong (and the task),
// and stores nothing: AX_WORKFLOWS stays empty and no task is released.
// Then a valid document is stored and runs (the control).
func TestWorkflowRefusedAsDeployed(t *testing.T) {
	t.Parallel()
	srv := startRoleServer(t, permissionsFile)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	startAxAs(t, url, "scheduler", "scheduler")
	dir := t.TempDir()

	wide := &ax.Workflow{ID: "wide", Tenant: "acme"}
	var parents []string
	for i := range 10_000 {
		name := fmt.Sprintf("p%d", i)
		wide.Add(name, ax.TaskSpec{Type: "echo"})
		parents = append(parents, name)
	}
	wide.Add("join", ax.TaskSpec{Type: "echo"}, parents...)
	huge := &ax.Workflow{ID: "huge", Tenant: "acme"}
	pad := make([]byte, 600<<10)
	for i := range 22 { // 800 KiB each in base64: 17.6 MiB
		huge.Add(fmt.Sprintf("t%d", i), ax.TaskSpec{Type: "echo", Payload: pad})
	}
	for _, c := range []struct {
		name string
		wf   *ax.Workflow
		want string
	}{
		{"cycle", (&ax.Workflow{ID: "cycle", Tenant: "acme"}).Add("a", ax.TaskSpec{Type: "echo"}, "c").
			Add("b", ax.TaskSpec{Type: "echo"}, "a").Add("c", ax.TaskSpec{Type: "echo"}, "b"),
			`invalid workflow "cycle": a cycle: a -> c -> b -> a`},
		{"missing", (&ax.Workflow{ID: "missing", Tenant: "acme"}).Add("a", ax.TaskSpec{Type: "echo"}).
			Add("b", ax.TaskSpec{Type: "echo"}, "a", "ghost"),
			`invalid workflow "missing": task "b" waits for "ghost", which is not a task of the workflow`},
		{"wide", wide, `invalid workflow "wide": task "join" waits for 10000 tasks, more than 1000: make a tree of joins`},
		{"huge", huge, `invalid workflow "huge": its `},
	} {
		data, err := json.Marshal(c.wf)
		require.NoError(t, err)
		file := filepath.Join(dir, c.name+".json")
		require.NoError(t, os.WriteFile(file, data, 0o600))
		stdout, stderr, err := runAxAs(url, "producer-acme", time.Minute, "workflow", "submit", file)
		require.Error(t, err, "%s: %s", c.name, stdout)
		require.Contains(t, stderr, c.want, c.name)
		if c.name == "huge" {
			require.Contains(t, stderr, fmt.Sprintf("more than the %d a workflow holds", ax.MaxWorkflowBytes))
			require.Greater(t, len(data), ax.MaxWorkflowBytes)
		}
	}

	nc, js := srv.ConnectAs("scheduler")
	defer nc.Close()
	ctx := context.Background()
	stream, err := js.Stream(ctx, "AX_WORKFLOWS")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "a refused workflow stored %d messages", info.State.Msgs)
	tasks, err := js.Stream(ctx, "KV_AX_TASKS")
	require.NoError(t, err)
	tinfo, err := tasks.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, tinfo.State.Msgs, "a task of a refused workflow was recorded")
	require.Zero(t, axtest.BucketMessages(t, ctx, js), "a task of a refused workflow was released")

	ok := filepath.Join(dir, "ok.json")
	require.NoError(t, os.WriteFile(ok, []byte(`{"id": "ok", "tenant": "acme", "tasks": [{"name": "a", "task": {"type": "echo"}}]}`), 0o600))
	require.Equal(t, "ok: 1 tasks", strings.TrimSpace(mustAxAs(t, url, "producer-acme", "workflow", "submit", ok)))
	require.Eventually(t, func() bool { // released without a record: a message in its bucket
		return axtest.BucketMessages(t, ctx, js) > 0
	}, 30*time.Second, 100*time.Millisecond, "the valid workflow was not released")
}
