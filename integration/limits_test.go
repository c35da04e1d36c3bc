package integration

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A worker process SIGKILLed while it holds the one slot of a concurrency
// limit gives it back within its member TTL (10 s by default): a task that
// waited for the slot runs on another worker. Fails if slots leak: the
// waiting task never runs.
func TestLimitSlotOfASIGKILLedWorkerComesBack(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	require.Contains(t, runAx(t, "limit", "set", "sleep", "--concurrency", "1", "--server", dev.url), "sleep")
	a := startAx(t, "worker", "--server", dev.url, "--id", "doomed")
	require.Eventually(t, func() bool { return strings.Contains(a.output(), "joining the mesh") || a.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not start:\n%s", a.output())
	runAx(t, "submit", "sleep", "--payload", `{"ms":600000}`, "--id", "long", "--server", dev.url)
	inUse := regexp.MustCompile(`(?m)^sleep\s+1\s+1\s`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := axOutput("limit", "ls", "--server", dev.url)
		assert.NoError(c, err)
		assert.Regexp(c, inUse, out)
	}, 30*time.Second, 100*time.Millisecond, "the long task never took the slot")
	a.kill(t)
	killed := time.Now()

	b := startAx(t, "worker", "--server", dev.url, "--id", "survivor")
	require.Eventually(t, func() bool { return strings.Contains(b.output(), "joining the mesh") || b.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not start:\n%s", b.output())
	runAx(t, "submit", "sleep", "--payload", `{"ms":1}`, "--id", "short", "--server", dev.url)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := axOutput("task", "get", "short", "--server", dev.url)
		assert.NoError(c, err)
		assert.Regexp(c, `State\s+SUCCEEDED`, out)
	}, 40*time.Second, 200*time.Millisecond, "the waiting task never ran")
	require.Less(t, time.Since(killed), 25*time.Second, "the slot came back later than the member TTL allows")
}
