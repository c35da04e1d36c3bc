package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `ax dev` runs the leader loops: a task submitted with --delay is PENDING,
// then runs; a cron job added with `ax cron add` fires, shows its last run
// in `ax cron ls`, and stops after `ax cron rm`.
func TestDelayedAndCronThroughTheCLI(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	id := strings.TrimSpace(runAx(t, "submit", "echo", "--payload", "later", "--delay", "2s", "--server", dev.url))
	require.Regexp(t, `State\s+PENDING`, runAx(t, "task", "get", id, "--server", dev.url))
	var rec kv.Record
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := runAx(c, "task", "get", id, "--server", dev.url, "--json")
		if assert.NoError(c, json.Unmarshal([]byte(out), &rec)) {
			assert.Equal(c, kv.StateSucceeded, rec.State)
		}
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, kv.StatePending, rec.Trail[0].To)
	require.False(t, rec.StartedAt.Before(*rec.RunAt), "started before its run time")

	require.Contains(t, runAx(t, "cron", "add", "tick", "@every 1s", "--type", "echo", "--payload", "tick", "--server", dev.url), "cron tick added")
	var jobs []ax.CronJob
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := runAx(c, "cron", "ls", "--server", dev.url, "--json")
		if assert.NoError(c, json.Unmarshal([]byte(out), &jobs)) && assert.Len(c, jobs, 1) {
			assert.False(c, jobs[0].Last.IsZero(), "the job has fired")
		}
	}, 30*time.Second, 100*time.Millisecond)
	last := jobs[0].Last
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := runAx(c, "task", "get", jobs[0].TaskID(last), "--server", dev.url, "--json")
		if assert.NoError(c, json.Unmarshal([]byte(out), &rec)) {
			assert.Equal(c, kv.StateSucceeded, rec.State)
		}
	}, 30*time.Second, 100*time.Millisecond)
	require.Contains(t, runAx(t, "cron", "ls", "--server", dev.url), "@every 1s")
	require.Contains(t, runAx(t, "cron", "rm", "tick", "--server", dev.url), "removed")
	require.NotContains(t, runAx(t, "cron", "ls", "--server", dev.url), "tick")
}
