package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A task published by a plain NATS client runs once; `ax task get` reads
// SUCCEEDED and `ax task trail` shows READY -> RUNNING -> SUCCEEDED.
func TestPlainPublishThroughTheCLI(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	require.NoError(t, dev.nc.Publish("ax.submit.p2.acme.sleep.k1", []byte(`{"ms":10}`)))
	require.NoError(t, dev.nc.Flush())

	// No Nats-Msg-Id: the task's id is "<stream>-<seq>-<store time>".
	js, err := jetstream.New(dev.nc)
	require.NoError(t, err)
	var id string
	require.Eventually(t, func() bool {
		bucket, err := js.KeyValue(context.Background(), "AX_TASKS")
		if err != nil {
			return false
		}
		keys, err := bucket.ListKeys(context.Background())
		if err != nil {
			return false
		}
		defer func() { _ = keys.Stop() }()
		for key := range keys.Keys() {
			if ref, err := kv.ParseKey(key); err == nil && strings.HasPrefix(ref.ID, "AX_P2-1-") {
				id = ref.ID
			}
		}
		return id != ""
	}, 30*time.Second, 100*time.Millisecond)
	var rec kv.Record
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := runAx(c, "task", "get", id, "--server", dev.url, "--json")
		if assert.NoError(c, json.Unmarshal([]byte(out), &rec)) {
			assert.Equal(c, kv.StateSucceeded, rec.State)
		}
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, 1, rec.Attempt)

	trail := runAx(t, "task", "trail", id, "--server", dev.url)
	lines := strings.Split(strings.TrimSpace(trail), "\n")
	require.Len(t, lines, 4, trail) // header + 3 moves
	for i, want := range [][2]string{{"-", "READY"}, {"READY", "RUNNING"}, {"RUNNING", "SUCCEEDED"}} {
		fields := strings.Fields(lines[i+1])
		require.Equal(t, want[0], fields[1], trail)
		require.Equal(t, want[1], fields[2], trail)
	}
}

// `ax submit` returns an id that `ax task get` knows at once.
func TestSubmitThenGet(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	id := strings.TrimSpace(runAx(t, "submit", "sleep", "--payload", `{"ms":1}`, "--priority", "p1", "--tenant", "acme", "--server", dev.url))
	require.NotEmpty(t, id)
	out := runAx(t, "task", "get", id, "--server", dev.url)
	require.Contains(t, out, "acme")
	require.Regexp(t, `State\s+(READY|RUNNING|SUCCEEDED)`, out)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, runAx(c, "task", "get", id, "--server", dev.url), "SUCCEEDED")
	}, 30*time.Second, 100*time.Millisecond)

	again := strings.TrimSpace(runAx(t, "submit", "sleep", "--id", id, "--priority", "p1", "--tenant", "acme", "--server", dev.url))
	require.Equal(t, id+" (duplicate: already submitted)", again)
	// A task id belongs to its tenant: another tenant's task with the id
	// is a task of its own.
	other := strings.TrimSpace(runAx(t, "submit", "sleep", "--id", id, "--priority", "p1", "--tenant", "globex", "--server", dev.url))
	require.Equal(t, id, other)

	// --json prints snake_case keys, as every JSON of ax, without a zero
	// run_at for a task that runs at once.
	out = runAx(t, "submit", "sleep", "--payload", `{"ms":1}`, "--tenant", "acme", "--server", dev.url, "--json")
	require.NotContains(t, out, "0001-01-01")
	var info map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &info), out)
	require.NotEmpty(t, info["id"], out)
	require.Equal(t, "acme", info["tenant"], out)
	require.NotContains(t, info, "run_at", out)
	out = runAx(t, "submit", "sleep", "--delay", "1h", "--tenant", "acme", "--server", dev.url, "--json")
	var delayed map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &delayed), out)
	require.Contains(t, delayed, "run_at", out)
}

// `ax submit` takes a payload beyond a command line's limit from a file or
// standard input, and `ax task get` of a PENDING task shows its run time
// instead of "Attempt 0 of 0" (issue 17.12).
func TestSubmitPayloadFileAndPendingGet(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	big := strings.Repeat("x", 300<<10) // above the ~128 KB of one command-line argument
	path := filepath.Join(t.TempDir(), "payload")
	require.NoError(t, os.WriteFile(path, []byte(big), 0o600))
	id := strings.TrimSpace(runAx(t, "submit", "echo", "--payload-file", path, "--server", dev.url))
	js, err := jetstream.New(dev.nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		bucket, err := js.KeyValue(context.Background(), "AX_TASKS")
		if err != nil {
			return false
		}
		entry, err := bucket.Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: id}.Key())
		return err == nil && strings.Contains(string(entry.Value()), `"state":"SUCCEEDED"`)
	}, 30*time.Second, 100*time.Millisecond)

	cmd := exec.Command(axBinary, "submit", "echo", "--payload-file", "-", "--id", "from-stdin", "--delay", "1h", "--server", dev.url)
	cmd.Stdin = strings.NewReader("hello from stdin")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	get := runAx(t, "task", "get", "from-stdin", "--server", dev.url)
	require.Contains(t, get, "Run at")
	require.Contains(t, get, "not started")
	require.NotContains(t, get, "0 of 0")
}
