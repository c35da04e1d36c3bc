package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// examples/quickstart, built and run as README says, against `ax dev
// --demo 0 --workers 0` on a non-default port named by NATS_URL alone:
// its three tasks are submitted, run by its own worker and their results
// printed, and it exits 0.
func TestQuickstartExample(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	bin := filepath.Join(t.TempDir(), "quickstart")
	build := exec.Command("go", "build", "-o", bin, "../examples/quickstart")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build examples/quickstart:\n%s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "NATS_URL="+dev.url)
	out, err = run.CombinedOutput()
	require.NoError(t, err, "quickstart:\n%s", out)
	got := string(out)
	for _, p := range []string{"p0", "p2", "p4"} {
		require.Contains(t, got, "at "+p, got)
	}
	done := regexp.MustCompile(`(?m)^(\S+) done: \{"thumbnail":"cat-\d\.png@320w"\}`).FindAllStringSubmatch(got, -1)
	require.Len(t, done, 3, got)
	for _, m := range done {
		require.Contains(t, runAx(t, "task", "trail", m[1], "--server", dev.url), "SUCCEEDED")
	}

	// Without a server it says which URL it could not reach.
	run = exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "NATS_URL=nats://127.0.0.1:1")
	out, err = run.CombinedOutput()
	require.Error(t, err)
	require.True(t, strings.Contains(string(out), "connect to nats://127.0.0.1:1"), "%s", out)
}
