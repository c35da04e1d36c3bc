package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's tour, command by command, against a server on a
// non-default port and a fresh data dir, with NATS_URL set once as the
// README says and no --server flag (issue 17.11).
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	dev := startAx(t, "dev", "--demo", "0", "--listen", strings.TrimPrefix(url, "nats://"), "--data", t.TempDir())
	require.Eventually(t, func() bool { return strings.Contains(dev.output(), "serving") }, 60*time.Second, 50*time.Millisecond,
		"ax dev did not start:\n%s", dev.output())
	env := append(os.Environ(), "NATS_URL="+url)
	// runBy runs one ax command, failing through t: the test, or the
	// collector of an EventuallyWithT condition.
	runBy := func(t tb, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, axBinary, args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Run(), "ax %s\n%s", strings.Join(args, " "), errOut.String())
		return out.String()
	}
	run := func(args ...string) string {
		t.Helper()
		return runBy(t, args...)
	}
	eventually := func(want string, args ...string) string {
		t.Helper()
		var out string
		require.EventuallyWithT(t, func(c *assert.CollectT) { out = runBy(c, args...); assert.Contains(c, out, want) }, 30*time.Second, 200*time.Millisecond,
			"ax %s never showed %q", strings.Join(args, " "), want)
		return out
	}

	id := strings.TrimSpace(run("submit", "sleep", "--payload", `{"ms":100,"fail":1}`, "--priority", "p1", "--tenant", "acme"))
	get := eventually("SUCCEEDED", "task", "get", id)
	require.Contains(t, get, "2 of 5")
	trail := run("task", "trail", id)
	for _, s := range []string{"RETRYING", "SUCCEEDED"} {
		require.Contains(t, trail, s)
	}

	run("submit", "sleep", "--payload", `{"ms":3000}`, "--id", "slow-1")
	eventually("Progress", "task", "get", "slow-1")

	run("submit", "fail", "--id", "doomed-1")
	eventually("DEAD", "task", "get", "doomed-1")
	require.Contains(t, run("dlq", "ls"), "doomed-1")

	run("worker", "--help") // the tour starts one in the background; its flags need no --server
	require.Contains(t, run("workers"), "IN-FLIGHT")

	run("submit", "echo", "--payload", "later", "--delay", "30s", "--id", "later-1")
	require.Contains(t, run("task", "get", "later-1"), "PENDING")
	require.Contains(t, run("cron", "add", "heartbeat", "@every 10s", "--type", "echo", "--payload", "tick"), "added")
	require.Contains(t, run("cron", "ls"), "heartbeat")
	run("cron", "rm", "heartbeat")

	run("task", "pause", "later-1")
	run("task", "resume", "later-1")
	run("task", "reprioritize", "later-1", "p0")
	run("task", "cancel", "later-1")
	require.Contains(t, run("task", "get", "later-1"), "CANCELLED")
	require.Contains(t, run("tasks", "ls", "--tenant", "acme", "--state", "dead,retrying"), "of 0 tasks")
	run("tasks", "cancel", "--tenant", "acme", "--type", "email", "--dry-run")
	require.Contains(t, run("pause", "tenant:acme"), "paused tenant:acme")
	require.NotContains(t, run("resume", "tenant:acme"), "tenant:acme")
	run("dlq", "replay", "doomed-1")
	require.Contains(t, run("stats"), "p0")
	batch := filepath.Join(t.TempDir(), "mails.jsonl")
	require.NoError(t, os.WriteFile(batch, []byte(`{"id":"mail-1","type":"echo","payload":"aGk="}`+"\n"+`{"id":"mail-2","type":"echo"}`+"\n"), 0o600))
	require.Equal(t, "mail-1\nmail-2\n", run("submit", "--batch", batch))
	eventually("SUCCEEDED", "task", "get", "mail-2")
	require.Contains(t, run("workflow", "ls"), "ID")
}

// README's first screen (issue 36.9): the two commands that work on a
// fresh machine first, then the comparison with River, asynq and BullMQ,
// whose every figure is one docs/BENCHMARKS.md gives.
func TestReadmeFirstScreen(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	bench, err := os.ReadFile("../docs/BENCHMARKS.md")
	require.NoError(t, err)
	lines := strings.Split(string(readme), "\n")
	screen := strings.Join(lines[:min(len(lines), 30)], "\n")
	run, test := strings.Index(screen, "go run ./cmd/ax dev "), strings.Index(screen, "go test -race")
	require.True(t, run > 0 && test > run, "the two commands lead the first screen:\n%s", screen)
	var table []string
	for _, l := range lines[:min(len(lines), 30)] {
		if strings.HasPrefix(l, "| ") && strings.Index(screen, l) > test {
			table = append(table, l)
		}
	}
	require.Len(t, table, 6, "a header, its rule and four rows after the commands:\n%s", screen)
	for _, name := range []string{"ax", "River", "asynq", "BullMQ"} {
		require.Contains(t, strings.Join(table, "\n"), "| "+name, "the comparison names %s", name)
	}
	for _, figure := range regexp.MustCompile(`\b\d{1,2},\d{3}\b|\b274\b`).FindAllString(strings.Join(table, "\n"), -1) {
		require.True(t, strings.Contains(string(bench), figure), "README quotes %s, which docs/BENCHMARKS.md must give", figure)
	}
}
