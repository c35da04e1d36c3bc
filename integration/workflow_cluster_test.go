package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A workflow document in parts on a 3-node cluster with R3 streams: the
// atomic batch (its parts and the commit, about 2.2 MB) is committed on
// the replicated AX_WORKFLOWS, the node leading that stream is killed, and
// only then do the scheduler and a worker start: the leader reads the
// document from the stream's new leader (a replica's copy of the parts),
// and every task runs once, the join after its eight parents.
func TestWorkflowPartsOnR3Cluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t, ClusterOptions{})
	ctx := context.Background()
	pad := strings.Repeat("x", 200<<10)
	var tasks []map[string]any
	var roots []string
	for i := range 8 {
		name := fmt.Sprintf("root-%d", i)
		roots = append(roots, name)
		tasks = append(tasks, map[string]any{"name": name, "task": map[string]any{"type": "sleep",
			"payload": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf(`{"ms": 1, "pad": %q}`, pad)))}})
	}
	tasks = append(tasks, map[string]any{"name": "join", "task": map[string]any{"type": "sleep",
		"payload": base64.StdEncoding.EncodeToString([]byte(`{"ms": 1}`))}, "after": roots})
	data, err := json.Marshal(map[string]any{"id": "big-r3", "tasks": tasks})
	require.NoError(t, err)
	require.Greater(t, len(data), 1<<20, "the document must not fit one message")
	file := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(file, data, 0o600))

	out, err := axOutput("workflow", "submit", file, "--server", c.allURL)
	require.NoError(t, err)
	require.Equal(t, "big-r3: 9 tasks", strings.TrimSpace(out))
	stream, err := c.js.Stream(ctx, "AX_WORKFLOWS")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
	require.GreaterOrEqual(t, info.State.Msgs, uint64(3), "parts and their commit")

	leader := c.streamLeader("AX_WORKFLOWS")
	c.nodes[c.node(leader)].kill(t)
	require.Eventually(t, func() bool { return c.streamLeader("AX_WORKFLOWS") != leader }, 60*time.Second, 200*time.Millisecond)
	startAx(t, "scheduler", "--server", c.allURL)
	startAx(t, "worker", "--server", c.allURL, "--id", "w1", "--concurrency", "8", "--ack-wait", faultAckWait)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := axOutput("workflow", "get", "big-r3", "--server", c.allURL)
		if assert.NoError(ct, err) {
			assert.Contains(ct, out, "9 tasks: 9 SUCCEEDED")
		}
	}, 3*time.Minute, time.Second, "the workflow did not end")
	out, err = axOutput("task", "get", "big-r3/join", "--server", c.allURL, "--json")
	require.NoError(t, err)
	var join struct {
		Attempt   int       `json:"attempt"`
		StartedAt time.Time `json:"started_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &join))
	require.Equal(t, 1, join.Attempt, "the join ran more than once")
	for _, root := range roots {
		out, err := axOutput("task", "get", "big-r3/"+root, "--server", c.allURL, "--json")
		require.NoError(t, err)
		var rec struct {
			Attempt    int       `json:"attempt"`
			FinishedAt time.Time `json:"finished_at"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rec))
		require.Equal(t, 1, rec.Attempt, root)
		require.False(t, join.StartedAt.Before(rec.FinishedAt), "the join started before %s finished", root)
	}
	t.Logf("a %d-byte document in %d messages on R3, its stream's leader %s killed before the leader read it: 9 tasks ran once", len(data), info.State.Msgs, leader)
}
