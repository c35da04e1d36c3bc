package integration

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `ax dev --exit` stops its server after the demo: its hint to look at a
// sample task says to start ax dev again on the same data, and done as it
// says, `ax task trail` shows the task. Without --exit the hint is the
// trail command alone, with the server's URL (issue 36.9).
func TestDevExitHintWorks(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, axBinary, "dev", "--demo", "50", "--exit", "--listen", listen, "--data", data).CombinedOutput()
	require.NoError(t, err, "%s", out)
	hint := regexp.MustCompile("run `ax (dev [^`]+)`, then `ax (task trail [^`]+)`").FindStringSubmatch(string(out))
	require.NotNil(t, hint, "the hint says to start ax dev again, then the trail command:\n%s", out)

	dev := startAx(t, strings.Fields(hint[1])...)
	require.Eventually(t, func() bool { return strings.Contains(dev.output(), "serving") || dev.exited() }, 60*time.Second, 50*time.Millisecond)
	require.False(t, dev.exited(), "ax %s:\n%s", hint[1], dev.output())
	trail := runAx(t, strings.Fields(hint[2])...)
	require.Contains(t, trail, "SUCCEEDED", "ax %s", hint[2])

	// Serving, the hint is the trail command against this server.
	serving := startAx(t, "dev", "--demo", "20", "--listen", strings.TrimPrefix(freeURL(t), "nats://"), "--data", t.TempDir())
	require.Eventually(t, func() bool { return strings.Contains(serving.output(), "look at one:") || serving.exited() }, 60*time.Second, 50*time.Millisecond)
	line := regexp.MustCompile("look at one: ax (task trail \\S+ --server \\S+)\n").FindStringSubmatch(serving.output())
	require.NotNil(t, line, "%s", serving.output())
	require.Contains(t, runAx(t, strings.Fields(line[1])...), "SUCCEEDED")
}

// freeURL returns a NATS URL on a free port of 127.0.0.1.
func freeURL(t *testing.T) string { return fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)) }
