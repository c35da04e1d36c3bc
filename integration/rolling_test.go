package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// submitTypedOn submits a probe task of taskType lasting ms whose key falls
// on one of shards (each in turn, from the n-th key that does), and returns
// its id.
func (m *mesh) submitTypedOn(taskType string, shards []int, n int) string {
	m.t.Helper()
	require.NotEmpty(m.t, shards)
	key := ""
	for i, found := 0, 0; key == ""; i++ {
		k := fmt.Sprintf("%s-k%d", taskType, i)
		if slices.Contains(shards, streams.Shard(k)) {
			if found == n {
				key = k
			}
			found++
		}
	}
	info, err := m.client.Submit(context.Background(), ax.TaskSpec{Type: taskType, Key: key, Payload: []byte(`{"ms":5}`)})
	require.NoError(m.t, err)
	return info.ID
}

// failOnDead fails the test at once if any of ids is DEAD (a wait would
// otherwise run to its timeout).
func (m *mesh) failOnDead(ids []string) func() {
	return func() {
		for _, id := range ids {
			if rec := m.record(id); rec != nil && rec.State == kv.StateDead {
				m.t.Fatalf("task %s is DEAD: %s", id, rec.LastError)
			}
		}
	}
}

// declinedBy reports whether a record's trail holds a move of worker id
// that put the task back for want of a handler.
func declinedBy(rec *kv.Record, id string) bool {
	for _, mv := range rec.Trail {
		if mv.Action == worker.ActionNoHandler && mv.Worker == id && mv.To == kv.StateReady {
			return true
		}
	}
	return false
}

// A rolling deploy on the default layout, as processes: a worker of the
// previous release (no handler for charge_card) runs beside a new one that
// has it. Every charge_card task runs on the new worker, none is
// dead-lettered, including those whose shard the old worker owns: it puts
// them back READY (the attempt not counted, its trail saying why) and the
// new worker, seeing a peer without its type, pulls the old one's shards
// too. With only the old worker alive, charge_card tasks wait READY (ax
// workers and ax stats say why), and they run once a worker with the
// handler joins.
//
// Fails before the fix: the old worker dead-letters the tasks of its shards
// ("no handler registered for task type").
func TestRollingDeployUnknownTypeWaits(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	m.workerArgs = []string{"--probe-types", "probe"}
	old := m.spawn()
	m.workerArgs = []string{"--probe-types", "probe,charge_card"}
	fresh := m.spawn()
	owners := m.waitTable(old, fresh)

	var ids, onOld []string
	for i := range 8 {
		id := m.submitTypedOn("charge_card", owners.Shards(old), i)
		ids, onOld = append(ids, id), append(onOld, id)
	}
	for i := range 4 {
		ids = append(ids, m.submitTypedOn("charge_card", owners.Shards(fresh), i))
	}
	m.waitSucceeded(ids, 2*time.Minute, m.failOnDead(ids))
	m.requireNoDeadLetters()
	m.requireServedTypes(map[string][]string{fresh: {"charge_card"}})
	declined := 0
	for _, id := range onOld {
		rec := m.record(id)
		require.Equal(t, 1, rec.Attempt, "a put-back does not count an attempt: %s", describe(rec))
		if declinedBy(rec, old) {
			declined++
		}
	}
	t.Logf("%d of the %d tasks on the old worker's shards were put back by it before the new one ran them", declined, len(onOld))

	// Only the old worker: the tasks wait, READY, put back by it.
	m.stop(fresh)
	owners = m.waitTable(old)
	var waiting []string
	for i := range 6 {
		waiting = append(waiting, m.submitTypedOn("charge_card", owners.Shards(old), i))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range waiting {
			rec := m.record(id)
			if assert.NotNil(c, rec) {
				assert.True(c, declinedBy(rec, old), "task %s not put back by %s yet: %s", id, old, describe(rec))
			}
		}
	}, time.Minute, 100*time.Millisecond)
	// The worker announces the types it put back with its membership
	// renewal, which may come after the records' moves.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, runAx(t, "workers", "--server", m.url), old+" has no handler for charge_card: it puts their tasks back")
		assert.Contains(c, runAx(t, "stats", "--server", m.url), fmt.Sprintf("unserved type charge_card: %d tasks waiting", len(waiting)))
	}, 30*time.Second, 200*time.Millisecond)
	hold := time.Now().Add(3 * time.Second)
	for time.Now().Before(hold) {
		require.Equal(t, map[kv.State]int{kv.StateReady: len(waiting)}, m.states(waiting), "tasks of a type no live worker serves wait READY")
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range waiting {
		require.Equal(t, 0, m.record(id).Attempt, "no attempt counted while the task waits")
	}
	m.workerArgs = []string{"--probe-types", "probe,charge_card"}
	next := m.spawn()
	m.waitSucceeded(waiting, 2*time.Minute, m.failOnDead(waiting))
	m.requireNoDeadLetters()
	m.requireServedTypes(map[string][]string{fresh: {"charge_card"}, next: {"charge_card"}})
}
