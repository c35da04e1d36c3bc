package integration

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// On a deployment started without --pools (the default layout), `ax
// worker --types email` would take its share of every type's shards and
// dead-letter the other types' tasks there (the pools attack saw 95 of 200
// resize tasks DEAD beside a full worker): it refuses to start, saying why.
func TestTypesFlagRefusedOnDefaultLayout(t *testing.T) {
	t.Parallel()
	m := newMesh(t) // no --pools
	narrowed := m.spawnPool("email")
	p := m.workers[narrowed]
	require.Eventually(t, p.exited, 60*time.Second, 50*time.Millisecond, "ax worker --types on the default layout must exit")
	require.Contains(t, p.output(), "ax provision --pools", p.output())
	members, err := kv.ListMembers(context.Background(), m.js, streams.Names{})
	require.NoError(t, err)
	require.Empty(t, members, "the refused worker joined the mesh")
}

// Attack (held up): SIGKILL the only worker of a type while it runs its
// tasks. They wait (READY or RUNNING, never DEAD) and run once a new worker
// of the type starts; every task has its effect once, and the only
// re-executions are those the kill explains.
//
//	go test -race -run TestAttackPoolsKillOnlyWorkerOfType ./integration/
func TestAttackPoolsKillOnlyWorkerOfType(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--pools")
	a := m.spawnPool("email")
	r := m.spawnPool("report")
	m.waitPools(map[string][]string{"email": {a}, "report": {r}})
	// About 9 s of work for its 16 slots (300 tasks of 0-1 s): a backlog
	// still there when the kill lands, however long the reads of the
	// states below take on a loaded machine (300 tasks of 0-300 ms all ran
	// before the kill in one CI run, and the new worker had none left).
	reports := m.submitTyped(300, 1000, "report")
	require.Eventually(t, func() bool { return m.states(reports)[kv.StateSucceeded] > 20 }, time.Minute, 50*time.Millisecond)
	m.kill(r)
	time.Sleep(3 * time.Second) // past the member TTL of the tests' ack wait
	states := m.states(reports)
	require.Zero(t, states[kv.StateDead], "after the kill: %v", states)
	r2 := m.spawnPool("report")
	m.waitSucceeded(reports, 3*time.Minute, nil)
	m.requireNoDeadLetters()
	m.requireServedTypes(map[string][]string{r: {"report"}, r2: {"report"}})
	m.requireEffects(reports)
	j := m.readJournals()
	j.requireExplainedReexecutions(t)
	t.Logf("the only report worker killed with %v: all %d ran after a new one started; %s", states, len(reports), j.requireOneEffect(t))
}
