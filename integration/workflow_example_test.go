package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// examples/workflow, as README shows it, runs against ax dev: the mail
// reads the results of both its parents, each released after charge.
func TestWorkflowExample(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	bin := filepath.Join(t.TempDir(), "workflow")
	out, err := exec.Command("go", "build", "-o", bin, "../examples/workflow").CombinedOutput()
	require.NoError(t, err, "build examples/workflow:\n%s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "NATS_URL="+dev.url)
	out, err = run.CombinedOutput()
	require.NoError(t, err, "workflow:\n%s", out)
	m := regexp.MustCompile(`(?m)^(order-\w+)/mail: "mailed: shipped (order-\w+), invoiced (order-\w+)"$`).FindStringSubmatch(string(out))
	require.NotNil(t, m, "%s", out)
	require.Equal(t, m[1], m[2])
	require.Equal(t, m[1], m[3])
	require.Regexp(t, `4 tasks: 4 SUCCEEDED`, runAx(t, "workflow", "get", m[1], "--server", dev.url))
}
