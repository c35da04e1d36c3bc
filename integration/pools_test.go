package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spawnPool starts an `ax worker` of a pools deployment that registers the
// probe under every type of the tests (email, resize, report) and serves
// only types (--types); it returns the worker's id.
func (m *mesh) spawnPool(types ...string) string {
	m.workerArgs = []string{"--probe-types", "email,resize,report", "--types", strings.Join(types, ",")}
	defer func() { m.workerArgs = nil }()
	return m.spawn()
}

// submitTyped submits n probe tasks lasting 0..maxMS ms, of the types
// given in turn, on every priority.
func (m *mesh) submitTyped(n, maxMS int, types ...string) []string {
	m.t.Helper()
	tasks := make([]ax.TaskSpec, n)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: types[i%len(types)], Priority: ax.PriorityOf(i % 5), Tenant: fmt.Sprintf("t%d", i%3),
			Payload: fmt.Appendf(nil, `{"ms":%d}`, rand.IntN(maxMS+1))}
	}
	var ids []string
	for batch := range slices.Chunk(tasks, 1000) {
		infos, err := m.client.SubmitBatch(context.Background(), batch)
		require.NoError(m.t, err)
		for _, info := range infos {
			ids = append(ids, info.ID)
		}
	}
	return ids
}

// journalTypes reads, from the probe journals, the worker and type of
// every execution's start.
func (m *mesh) journalTypes() map[string][]string {
	m.t.Helper()
	files, err := filepath.Glob(filepath.Join(m.journal, "*.jsonl"))
	require.NoError(m.t, err)
	out := map[string][]string{} // worker -> types it ran, one per execution
	for _, name := range files {
		f, err := os.Open(name)
		require.NoError(m.t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev builtin.ProbeEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "start" {
				out[ev.Worker] = append(out[ev.Worker], ev.Type)
			}
		}
		require.NoError(m.t, f.Close())
	}
	return out
}

// requireServedTypes requires that every execution ran on a worker that
// serves its type, and that every worker ran some.
func (m *mesh) requireServedTypes(serves map[string][]string) {
	m.t.Helper()
	ran := m.journalTypes()
	for w, types := range ran {
		counts := map[string]int{}
		for _, typ := range types {
			require.Contains(m.t, serves[w], typ, "worker %s ran a task of type %q it does not serve", w, typ)
			counts[typ]++
		}
		m.t.Logf("worker %s (serves %v) ran %v", w, serves[w], counts)
	}
	for w := range serves {
		require.NotEmpty(m.t, ran[w], "worker %s ran nothing", w)
	}
}

// requireNoDeadLetters requires an empty AX_DLQ.
func (m *mesh) requireNoDeadLetters() {
	m.t.Helper()
	stream, err := m.js.Stream(context.Background(), "AX_DLQ")
	require.NoError(m.t, err)
	require.Zero(m.t, stream.CachedInfo().State.Msgs, "dead letters")
}

// Three workers of a pools deployment: A serves email, B resize, C both.
// Mixed tasks all succeed, with no dead letter, each execution on a worker
// that serves its type; SIGKILL of C midway changes nothing.
func TestPoolsRouteByType(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--pools")
	serves := map[string][]string{}
	for _, types := range [][]string{{"email"}, {"resize"}, {"email", "resize"}} {
		serves[m.spawnPool(types...)] = types
	}
	a, b, c := "w0", "w1", "w2"
	m.waitPools(map[string][]string{"email": {a, c}, "resize": {b, c}})
	// C dies midway: after some of the first half ran, before the second
	// half is submitted (a kill timed by a poll could come after the last
	// task on a quiet machine).
	ids := m.submitTyped(poolTasks/2, 5, "email", "resize")
	require.Eventually(t, func() bool { return m.states(ids)[kv.StateSucceeded] > len(ids)/10 },
		2*time.Minute, 20*time.Millisecond)
	m.kill(c)
	ids = append(ids, m.submitTyped(poolTasks/2, 5, "email", "resize")...)
	m.waitSucceeded(ids, 8*time.Minute, nil)
	m.requireNoDeadLetters()
	m.requireServedTypes(serves)
	m.requireEffects(ids)
	j := m.readJournals()
	effects := j.requireOneEffect(t)
	j.requireExplainedReexecutions(t)
	t.Logf("pools: %d tasks through A{email} B{resize} C{email,resize}, C killed midway: lost 0, dead 0; %s", len(ids), effects)
}

// waitPools waits until the pool table gives each type exactly the members
// listed.
func (m *mesh) waitPools(want map[string][]string) {
	m.t.Helper()
	ctx := context.Background()
	bucket, err := m.js.KeyValue(ctx, "AX_CONTROL")
	require.NoError(m.t, err)
	var table worker.PoolTable
	require.Eventually(m.t, func() bool {
		entry, err := bucket.Get(ctx, control.PoolTableKey)
		if err != nil || json.Unmarshal(entry.Value(), &table) != nil {
			return false
		}
		for typ, ids := range want {
			if !slices.Equal(table.Types[typ].Members, slices.Sorted(slices.Values(ids))) {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "pool table never gave %v (last: %+v)", want, table.Types)
}

// Moving a type between pools during a run: resize moves from B's pool to
// the email workers' (a new worker A2 serves email and resize; A and B
// stop). Nothing is lost and no task runs twice at once.
func TestPoolsMoveType(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--layout", "pools") // the long form of --pools
	serves := map[string][]string{}
	a := m.spawnPool("email")
	serves[a] = []string{"email"}
	b := m.spawnPool("resize")
	serves[b] = []string{"resize"}
	m.waitPools(map[string][]string{"email": {a}, "resize": {b}})
	// The move starts once some of the first half ran, and the second half
	// is submitted once A2 serves both types, before A and B stop: the
	// stops come while tasks of both types wait and run (a move timed by
	// waitSucceeded's poll came after most tasks on a quiet machine).
	ids := m.submitTyped(poolTasks/4, 200, "email", "resize")
	require.Eventually(t, func() bool { return m.states(ids[:len(ids)/10])[kv.StateSucceeded] > len(ids)/100 },
		2*time.Minute, 20*time.Millisecond)
	a2 := m.spawnPool("email", "resize")
	serves[a2] = []string{"email", "resize"}
	m.waitPools(map[string][]string{"email": {a, a2}, "resize": {b, a2}})
	ids = append(ids, m.submitTyped(poolTasks/4, 200, "email", "resize")...)
	// The stops start while a tenth or more of the tasks wait or run, as
	// the buckets' message counts say right before them (reading 5,000
	// records took longer than the tasks on a loaded machine, and a count
	// after the stops, which wait for their workers' grace, even more).
	var unfinished uint64
	for p := range streams.Priorities {
		unfinished += natstest.StreamMsgs(t, m.js, streams.Names{}.PriorityStream(p))
	}
	require.GreaterOrEqual(t, unfinished, uint64(len(ids)/10), "the move must come while tasks of both types wait and run")
	t.Logf("the move starts with %d of %d tasks waiting or running", unfinished, len(ids))
	m.stop(b)
	m.stop(a)
	m.waitSucceeded(ids, 8*time.Minute, nil)
	m.requireNoDeadLetters()
	m.requireServedTypes(serves)
	m.requireEffects(ids)
	j := m.readJournals()
	pairs, _ := j.overlaps()
	require.Zero(t, pairs, "overlapping executions")
	effects := j.requireOneEffect(t)
	t.Logf("pools: resize moved from B to A2 during %d tasks: lost 0, overlapping executions 0; %s", len(ids), effects)
}

// A type no worker serves waits in its bucket, visible in `ax stats --json`
// and in ax_unserved_tasks, and runs once a worker for it starts.
func TestPoolsUnservedTypeWaits(t *testing.T) {
	t.Parallel()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m := newMesh(t, "--pools", "--metrics-addr", metricsAddr)
	a := m.spawnPool("email")
	m.waitPools(map[string][]string{"email": {a}})
	emails := m.submitTyped(200, 5, "email")
	reports := m.submitTyped(100, 5, "report")
	m.waitSucceeded(emails, 2*time.Minute, nil)
	require.Equal(t, map[kv.State]int{kv.StateReady: len(reports)}, m.states(reports), "report tasks wait, READY")

	var stats admin.StatsReply
	require.NoError(t, json.Unmarshal([]byte(runAx(t, "stats", "--json", "--server", m.url)), &stats))
	require.Len(t, stats.Unserved, 1, "unserved: %+v", stats.Unserved)
	require.Equal(t, "report", stats.Unserved[0].Type)
	require.EqualValues(t, len(reports), stats.Unserved[0].Depth)
	require.False(t, stats.Unserved[0].Oldest.IsZero())
	require.Contains(t, scrape(t, metricsAddr), fmt.Sprintf(`ax_unserved_tasks{type="report"} %d`, len(reports)))

	serves := map[string][]string{a: {"email"}}
	r := m.spawnPool("report")
	serves[r] = []string{"report"}
	m.waitSucceeded(reports, 2*time.Minute, nil)
	// ax workers lists each type's ring: the worker, its pool, its shards.
	require.Eventually(t, func() bool {
		out, err := axOutput("workers", "--server", m.url)
		return err == nil && regexp.MustCompile(`(?m)^report\s+`+r+`\s+report\s+32\s+0-31\s*$`).MatchString(out) &&
			regexp.MustCompile(`(?m)^email\s+`+a+`\s+email\s+32\s+0-31\s*$`).MatchString(out)
	}, 30*time.Second, 200*time.Millisecond)
	m.requireNoDeadLetters()
	m.requireServedTypes(serves)
	stats = admin.StatsReply{}
	require.NoError(t, json.Unmarshal([]byte(runAx(t, "stats", "--json", "--server", m.url)), &stats))
	require.Empty(t, stats.Unserved)
	require.NotContains(t, scrape(t, metricsAddr), "ax_unserved_tasks{")
}

// An operator's deadline for an unserved type, end to end with the real
// binaries: `ax pools deadline report 2s`; `ax stats` says what happens to
// the waiting tasks; the leader of `ax dev` dead-letters every one of them
// (DEAD with the reason, in the dead-letter stream) and leaves the served
// type alone; once a worker for the type starts, `ax dlq replay --type
// report` runs each of them.
func TestPoolsUnservedDeadline(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--pools")
	a := m.spawnPool("email")
	m.waitPools(map[string][]string{"email": {a}})
	reports := m.submitTyped(50, 5, "report")
	require.Contains(t, runAx(t, "pools", "deadline", "--server", m.url), "no deadlines")
	set := runAx(t, "pools", "deadline", "report", "2s", "--server", m.url)
	require.Contains(t, set, "report: dead-lettered after 2s unserved")
	require.NotContains(t, set, "no effect")
	emails := m.submitTyped(100, 5, "email")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := axOutput("stats", "--server", m.url)
		assert.NoError(c, err)
		assert.Contains(c, out, "no live worker serves it; dead-lettered after 2s unserved")
	}, 30*time.Second, 100*time.Millisecond)
	m.waitSucceeded(emails, 2*time.Minute, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[kv.State]int{kv.StateDead: len(reports)}, m.states(reports))
	}, time.Minute, 200*time.Millisecond, "every unserved report task is dead-lettered")
	var letters admin.DLQListReply
	require.NoError(t, json.Unmarshal([]byte(runAx(t, "dlq", "ls", "--type", "report", "--json", "--server", m.url)), &letters))
	require.Len(t, letters.Letters, len(reports))
	for _, l := range letters.Letters {
		require.Contains(t, l.Error, `unserved: no live worker served task type "report"`)
	}

	serves := map[string][]string{a: {"email"}}
	r := m.spawnPool("report")
	serves[r] = []string{"report"}
	m.waitPools(map[string][]string{"email": {a}, "report": {r}})
	runAx(t, "pools", "deadline", "report", "0", "--server", m.url)
	runAx(t, "dlq", "replay", "--type", "report", "--server", m.url)
	m.waitSucceeded(reports, 2*time.Minute, nil)
	m.requireServedTypes(serves)
}

// On a deployment without pools a deadline applies to the types no live
// worker has a handler for: ax pools deadline sets it and says so.
func TestPoolsDeadlineWithoutPoolsSaysWhatItDoes(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	out := runAx(t, "pools", "deadline", "report", "1h", "--server", dev.url)
	require.Contains(t, out, "report: dead-lettered after 1h0m0s unserved")
	require.Contains(t, out, "a deadline applies to the tasks of a type no live worker has a handler for")
}
