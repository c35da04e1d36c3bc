package integration

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/stretchr/testify/require"
)

// The ax binary opens its deployment with deploy.Open (issue 25), as a Go
// service does: on a deployment provisioned with a 3 s ack wait, an
// `ax worker` or `ax scheduler` run with --ack-wait 30s exits at once
// saying the flag disagrees with the deployment, and one run without the
// flag runs with the server's 3 s. Before, the scheduler ran with the
// flag's 30 s (judging RUNNING records by another ack wait than the
// server's, so republishing late) and the worker logged the mismatch
// forever instead of exiting.
func TestCLIOpensTheDeployment(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.RunServer(t)
	url := nc.ConnectedUrl()
	runAx(t, "provision", "--server", url, "--ack-wait", "3s")

	for _, role := range []string{"worker", "scheduler"} {
		t.Run(role+" with a disagreeing --ack-wait exits", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, axBinary, role, "--server", url, "--ack-wait", "30s")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			require.NoError(t, ctx.Err(), "ax %s --ack-wait 30s did not exit:\n%s", role, stderr.String())
			require.Error(t, err)
			require.Contains(t, stderr.String(), "config disagrees with the deployment: AckWait 30s, the shard consumers' is 3s")
		})
	}
	for role, started := range map[string]string{"worker": "joining the mesh", "scheduler": "campaigning"} {
		t.Run(role+" without the flag takes the server's ack wait", func(t *testing.T) {
			p := startAx(t, role, "--server", url)
			require.Eventually(t, func() bool { return strings.Contains(p.output(), started) || p.exited() },
				30*time.Second, 50*time.Millisecond, "ax %s did not start:\n%s", role, p.output())
			require.Contains(t, p.output(), "(the deployment's ack wait: 3s)")
		})
	}
}
