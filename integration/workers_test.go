package integration

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// `ax worker` joins the mesh next to the workers of `ax dev`; `ax workers`
// lists all three with a split of the 32 shards, and a worker that stops
// leaves the list at once and its shards go to the others.
func TestWorkerJoinsTheMesh(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "2")
	members := func() []kv.Member {
		var reply admin.WorkersReply
		require.NoError(t, json.Unmarshal([]byte(runAx(t, "workers", "--json", "--server", dev.url)), &reply))
		return reply.Workers
	}
	split := func(ms []kv.Member, n int) bool {
		total := 0
		for _, m := range ms {
			if len(m.Shards) < 32/n || len(m.Shards) > (32+n-1)/n {
				return false
			}
			total += len(m.Shards)
		}
		return len(ms) == n && total == 32
	}
	require.Eventually(t, func() bool { return split(members(), 2) }, 30*time.Second, 200*time.Millisecond)

	w := startAx(t, "worker", "--id", "ext-1", "--concurrency", "4", "--server", dev.url)
	var ms []kv.Member
	require.Eventually(t, func() bool { ms = members(); return split(ms, 3) }, 30*time.Second, 200*time.Millisecond,
		"members: %+v\n%s", ms, w.output())
	i := 0
	for ms[i].ID != "ext-1" {
		i++
	}
	require.Equal(t, 4, ms[i].Concurrency)
	table := runAx(t, "workers", "--server", dev.url)
	require.Contains(t, table, "ext-1")
	require.Contains(t, table, "3 workers, 0 tasks in flight, 32 of 32 shards owned")

	require.NoError(t, w.cmd.Process.Signal(os.Interrupt))
	<-w.done
	require.Eventually(t, func() bool { return split(members(), 2) }, 5*time.Second, 100*time.Millisecond,
		"a stopped worker leaves at once, not after its lease TTL")
	require.False(t, strings.Contains(runAx(t, "workers", "--server", dev.url), "ext-1"))
}
