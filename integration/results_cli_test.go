package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// `ax submit echo --payload hi --wait` prints hi (the echo type returns its
// payload as its result); `ax task result` prints it again, `ax task get`
// shows it, `ax task watch` follows a task to its end, and a failed task's
// --wait fails with its state and last error.
func TestResultsThroughTheCLI(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	out := runAx(t, "submit", "echo", "--payload", "hi", "--id", "greet-1", "--tenant", "acme", "--wait", "--server", dev.url)
	require.Equal(t, "hi", out)
	require.Equal(t, "hi", runAx(t, "task", "result", "greet-1", "--server", dev.url))
	get := runAx(t, "task", "get", "greet-1", "--server", dev.url)
	require.Regexp(t, `Result\s+hi`, get)
	watch := runAx(t, "task", "watch", "greet-1", "--server", dev.url)
	require.Contains(t, watch, "SUCCEEDED attempt 1")
	require.Contains(t, watch, "result 2 bytes")

	_, err := axOutput("submit", "fail", "--id", "fail-1", "--wait", "--server", dev.url)
	require.ErrorContains(t, err, "task fail-1 (tenant default) ended DEAD")
	require.ErrorContains(t, err, "fails by design")
	_, err = axOutput("task", "result", "fail-1", "--server", dev.url)
	require.ErrorContains(t, err, "ended DEAD")

	// A task that reports progress: watch shows it while it runs.
	reg := worker.NewRegistry()
	release := make(chan struct{})
	require.NoError(t, reg.Handle("crunch", func(ctx context.Context, task *worker.Task) error {
		if err := task.Progress(ctx, 40, "crunching"); err != nil {
			return err
		}
		<-release
		return nil
	}, nil))
	w, err := worker.New(context.Background(), dev.js, &worker.Config{Registry: reg})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	client, err := ax.NewClient(context.Background(), dev.js, nil)
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	_, err = client.Submit(context.Background(), ax.TaskSpec{ID: "crunch-1", Type: "crunch"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		get, err := axOutput("task", "get", "crunch-1", "--server", dev.url)
		return err == nil && strings.Contains(get, "40% crunching")
	}, 30*time.Second, 100*time.Millisecond)
	p := startAx(t, "task", "watch", "crunch-1", "--server", dev.url)
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "RUNNING attempt 1/5 40% crunching") }, 30*time.Second, 20*time.Millisecond,
		"ax task watch shows the running task's progress: %s", p.output())
	close(release)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("ax task watch did not end with the task: %s", p.output())
	}
	require.Contains(t, p.output(), "SUCCEEDED")
	require.Zero(t, p.cmd.ProcessState.ExitCode(), p.output())
}

// A raw producer reads a task's result with the nats CLI command of
// docs/WIRE.md, as written.
func TestResultWithNatsCLI(t *testing.T) {
	nats := natsCLI(t)
	dev := startDev(t)
	doc, err := os.ReadFile("../docs/WIRE.md")
	require.NoError(t, err)
	const line = "nats kv get AX_TASKS acme.order-42 --raw | jq -r .result | base64 -d"
	require.Contains(t, string(doc), "\n"+line+"\n", "the command is documented as written")
	require.Equal(t, "hi", runAx(t, "submit", "echo", "--payload", "hi", "--id", "order-42", "--tenant", "acme", "--wait", "--server", dev.url))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; "+line)
	cmd.Env = append(os.Environ(), "NATS_URL="+dev.url, "HOME="+t.TempDir(),
		"PATH="+filepath.Dir(nats)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, "hi", string(out))
}
