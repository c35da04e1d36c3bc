package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// execution is one run of a probe task, from its journal lines.
type execution struct {
	task, worker string
	attempt      int
	delivery     uint64
	start, end   time.Time // end: its last line, or its worker's death, or now
	effect       bool      // it attempted its side effect ("effect" line)
	effectAt     time.Time
	finished     bool // its effect is applied (or was already there)
	failed       bool // it returned an error: an injected failure before the effect, or a failed effect write
	aborted      bool // its context ended before the effect (timeout, cancel, a lapsed claim)
	killed       bool // no end line, and its worker died: cut short by the death
	live         bool // no end line, and its worker did not die (yet): still running, or frozen
}

func (e execution) String() string {
	end := "live"
	switch {
	case e.finished:
		end = "finished"
	case e.failed:
		end = "failed"
	case e.aborted:
		end = "aborted"
	case e.killed:
		end = "killed"
	}
	effect := "no effect"
	if e.effect {
		effect = "effect at " + e.effectAt.Format("15:04:05.000")
	}
	return fmt.Sprintf("worker %s attempt %d delivery %d, %s-%s, %s, %s",
		e.worker, e.attempt, e.delivery, e.start.Format("15:04:05.000"), e.end.Format("15:04:05.000"), effect, end)
}

// ended reports whether the execution wrote its end line.
func (e *execution) ended() bool { return e.finished || e.failed || e.aborted }

// journal is what every probe worker wrote.
type journal struct {
	executions map[string][]execution // by task, in order of start
	// finalWriteFailed holds, by task, the workers that logged that the
	// write settling an execution of it failed (final_write_failed) or was
	// not made because the claim had lapsed before it (final_write_fenced:
	// no heartbeat confirmed within the ack wait, as on an overloaded
	// machine; or lost_claim with that reason, when the lapse came as the
	// handler returned): the outcome was not recorded, so the task runs
	// again.
	finalWriteFailed map[string]map[string]bool
	logs             map[string][]string // the workers' log lines about each task, for failure reports
	// deaths maps a worker id to when it was killed.
	deaths map[string]time.Time
	// settled holds, by task, the moves out of RUNNING its record's trail
	// shows (see [journal.noteTrail]): the outcomes that were recorded.
	settled map[string][]kv.Move
}

// noteTrail keeps the moves out of RUNNING in rec's trail: with them,
// [journal.effects] tells an execution that finished but whose worker was
// killed before recording its outcome (the task runs again: at least once)
// from one whose outcome was recorded (it must not).
func (j *journal) noteTrail(rec *kv.Record) {
	j.settled[rec.ID] = []kv.Move{}
	for _, m := range rec.Trail {
		if m.From == kv.StateRunning {
			j.settled[rec.ID] = append(j.settled[rec.ID], m)
		}
	}
}

// killedBeforeOutcome reports whether e finished, its worker was killed
// after that and before next (the next execution's effect or start), and
// the record's trail (noted with [journal.noteTrail]) shows no outcome its
// worker recorded after it started: the worker died between the handler's
// return and the write of its outcome.
func (j *journal) killedBeforeOutcome(e execution, next time.Time) bool {
	death, killed := j.deaths[e.worker]
	moves, noted := j.settled[e.task]
	if !e.finished || !killed || !noted || death.Before(e.end) || death.After(next) {
		return false
	}
	for _, m := range moves {
		if m.Worker == e.worker && !m.At.Before(e.start) {
			return false
		}
	}
	return true
}

// noteLogs reads the JSON log of worker (its output) for the tasks whose
// settling write failed.
func (j *journal) noteLogs(worker, output string) {
	for line := range strings.Lines(output) {
		entry, ok := parseLogLine(strings.TrimRight(line, "\r\n"))
		id := entry.field("task_id")
		if !ok || id == "" {
			continue
		}
		j.logs[id] = append(j.logs[id], worker+": "+strings.TrimSpace(line))
		lapsed := entry.Msg == "lost_claim" && strings.Contains(entry.field("reason"), "claim lapsed")
		if entry.Msg != "final_write_failed" && entry.Msg != "final_write_fenced" && !lapsed {
			continue
		}
		if j.finalWriteFailed[id] == nil {
			j.finalWriteFailed[id] = map[string]bool{}
		}
		j.finalWriteFailed[id][worker] = true
	}
}

// readJournals parses every *.jsonl file in dir. A worker killed mid-line
// leaves a torn last line, which is skipped. deaths maps a worker id to
// when it died; an execution without an end line ends there.
func readJournals(t *testing.T, dir string, deaths map[string]time.Time) *journal {
	t.Helper()
	j := &journal{executions: map[string][]execution{}, finalWriteFailed: map[string]map[string]bool{}, logs: map[string][]string{},
		deaths: deaths, settled: map[string][]kv.Move{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	type key struct {
		file string
		exec uint64 // unique within one probe, that is one file (one worker process)
	}
	open := map[key]*execution{}
	var order []key
	for _, name := range files {
		f, err := os.Open(name)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev builtin.ProbeEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			k := key{name, ev.Exec}
			at := time.Unix(0, ev.At)
			if ev.Event == "start" {
				open[k] = &execution{task: ev.Task, worker: ev.Worker, attempt: ev.Attempt, delivery: ev.Delivery, start: at}
				order = append(order, k)
				continue
			}
			e := open[k]
			if e == nil {
				continue
			}
			switch ev.Event {
			case "effect":
				e.effect, e.effectAt = true, at
			case "finish":
				e.end, e.finished = at, true
			case "error":
				e.end, e.failed = at, true
			case "abort":
				e.end, e.aborted = at, true
			}
		}
		require.NoError(t, f.Close())
	}
	for _, k := range order {
		e := open[k]
		if !e.ended() {
			if death, ok := deaths[e.worker]; ok {
				e.end, e.killed = death, true
			} else {
				e.end, e.live = time.Now(), true
			}
		}
		j.executions[e.task] = append(j.executions[e.task], *e)
	}
	for task := range j.executions {
		slices.SortFunc(j.executions[task], func(a, b execution) int { return a.start.Compare(b.start) })
	}
	return j
}

// overlaps counts the pairs of executions of one task that ran at the same
// time (one started before the other ended) and names their tasks.
func (j *journal) overlaps() (pairs int, tasks []string) {
	for task, runs := range j.executions {
		n := 0
		for i := range runs {
			for k := i + 1; k < len(runs); k++ {
				if runs[k].start.Before(runs[i].end) {
					n++
				}
			}
		}
		if n > 0 {
			pairs += n
			tasks = append(tasks, task)
		}
	}
	slices.Sort(tasks)
	return pairs, tasks
}

// effectCounts counts the probe's attempts at its side effect ("effect"
// lines, written before the effect: the create-if-absent bucket behind it
// would hide a second one).
type effectCounts struct {
	attempts int // effect attempts, all tasks
	tasks    int // tasks with at least one
	// Extra attempts of a task, beyond its first, that a failure explains:
	// the previous attempt's execution was killed after its "effect" line
	// (at least once delivery: the effect may or may not have landed), or
	// its effect write failed, or it finished but its worker's write of the
	// outcome failed (final_write_failed, see [journal.noteLogs]), or it
	// finished but its worker was killed before recording the outcome (see
	// [journal.killedBeforeOutcome]), so the task ran again.
	afterKill, afterFailedEffect, afterFailedOutcome, afterKillBeforeOutcome int
	// unexplained names the tasks with an extra attempt whose previous
	// attempt's execution completed its effect, is still running, or ended
	// only after the extra attempt: two executions reached the effect of
	// one task.
	unexplained []string
}

func (c effectCounts) String() string {
	return fmt.Sprintf("%d effect attempts on %d tasks; extra attempts: %d after a worker killed past its effect line, %d after a failed effect write, "+
		"%d after a failed outcome write, %d after a worker killed between its effect and its outcome, %d unexplained",
		c.attempts, c.tasks, c.afterKill, c.afterFailedEffect, c.afterFailedOutcome, c.afterKillBeforeOutcome, len(c.unexplained))
}

// effects counts the effect attempts: at most one per task outside
// executions that aborted before their effect, unless a failure explains
// the extra one (see [effectCounts]).
func (j *journal) effects() effectCounts {
	var c effectCounts
	for task, runs := range j.executions {
		var tried []execution
		for _, e := range runs {
			if e.effect {
				tried = append(tried, e)
			}
		}
		slices.SortFunc(tried, func(a, b execution) int { return a.effectAt.Compare(b.effectAt) })
		c.attempts += len(tried)
		if len(tried) > 0 {
			c.tasks++
		}
		bad := false
		for i := 1; i < len(tried); i++ {
			// The failure explains the next attempt only if it came first.
			switch prev := tried[i-1]; {
			case prev.end.After(tried[i].effectAt):
				bad = true
			case prev.killed:
				c.afterKill++
			case prev.failed:
				c.afterFailedEffect++
			case prev.finished && j.finalWriteFailed[task][prev.worker]:
				c.afterFailedOutcome++
			case j.killedBeforeOutcome(prev, tried[i].effectAt):
				c.afterKillBeforeOutcome++
			default:
				bad = true
			}
		}
		if bad {
			c.unexplained = append(c.unexplained, task)
		}
	}
	slices.Sort(c.unexplained)
	return c
}

// reexecutions counts executions beyond the first of each task: those
// after the previous execution's worker was killed (during it, or after it
// finished and before its outcome was written: [journal.killedBeforeOutcome]),
// those after the previous execution was aborted by its own worker (its
// claim lapsed: it stopped itself and applied no effect), those after the
// previous execution failed (a retry) or its outcome's write did
// (final_write_failed), and the tasks where a re-execution has none of
// these explanations.
func (j *journal) reexecutions() (afterKill, afterAbort, afterError int, unexplained []string) {
	for task, runs := range j.executions {
		for i := 1; i < len(runs); i++ {
			prev := runs[i-1]
			switch {
			case prev.killed && !prev.end.After(runs[i].start):
				afterKill++
			case j.killedBeforeOutcome(prev, runs[i].start):
				afterKill++
			case prev.aborted && !prev.end.After(runs[i].start):
				afterAbort++
			case prev.failed && !prev.end.After(runs[i].start):
				afterError++
			case prev.finished && !prev.end.After(runs[i].start) && j.finalWriteFailed[task][prev.worker]:
				afterError++
			default:
				unexplained = append(unexplained, task)
			}
		}
	}
	return afterKill, afterAbort, afterError, unexplained
}

// requireExplainedReexecutions requires every re-execution to be explained
// (see [journal.reexecutions]), logging the executions and log lines of the
// first unexplained tasks, and returns the counts.
func (j *journal) requireExplainedReexecutions(t *testing.T) (afterKill, afterAbort, afterError int) {
	t.Helper()
	afterKill, afterAbort, afterError, unexplained := j.reexecutions()
	slices.Sort(unexplained)
	unexplained = slices.Compact(unexplained)
	for _, task := range firstN(unexplained, 3) {
		for _, e := range j.executions[task] {
			t.Logf("task %s: %s", task, e)
		}
		for _, line := range firstN(j.logs[task], 10) {
			t.Logf("task %s: %s", task, line)
		}
	}
	require.Empty(t, unexplained, "re-executions not explained by a killed worker, a self-fenced execution or a failure")
	return afterKill, afterAbort, afterError
}

// requireOneEffect requires, of the journals, no overlapping executions and
// no unexplained second effect attempt, and returns the effect counts.
func (j *journal) requireOneEffect(t *testing.T) effectCounts {
	t.Helper()
	pairs, tasks := j.overlaps()
	c := j.effects()
	if pairs > 0 || len(c.unexplained) > 0 {
		for _, task := range slices.Concat(firstN(tasks, 3), firstN(c.unexplained, 3)) {
			for _, e := range j.executions[task] {
				t.Logf("task %s: %s", task, e)
			}
			for _, line := range firstN(j.logs[task], 10) {
				t.Logf("task %s: %s", task, line)
			}
		}
	}
	require.True(t, pairs == 0 && len(c.unexplained) == 0,
		"overlapping executions: %d pairs (tasks %v); %s (tasks with two effect attempts, the first neither killed nor failed: %v)",
		pairs, firstN(tasks, 10), c, firstN(c.unexplained, 10))
	return c
}

// firstN returns the first n of s, for messages.
func firstN[T any](s []T, n int) []T { return s[:min(n, len(s))] }

// TestJournalExplainsAKillBeforeTheOutcome checks the journal's reading of
// a second effect attempt after a finished execution whose worker was
// killed: explained only when the record's trail shows no outcome that
// worker recorded (it died between the handler's return and the outcome's
// write), unexplained when the trail shows one or was not read.
func TestJournalExplainsAKillBeforeTheOutcome(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	first := execution{task: "t", worker: "w1", attempt: 1, start: at(0), effect: true, effectAt: at(10), end: at(20), finished: true}
	second := execution{task: "t", worker: "w2", attempt: 2, start: at(100), effect: true, effectAt: at(110), end: at(120), finished: true}
	build := func(death time.Time, trail []kv.Move) *journal {
		j := &journal{executions: map[string][]execution{"t": {first, second}}, deaths: map[string]time.Time{"w1": death},
			settled: map[string][]kv.Move{}}
		if trail != nil {
			j.noteTrail(&kv.Record{ID: "t", Trail: trail})
		}
		return j
	}
	claim := kv.Move{From: kv.StateReady, To: kv.StateRunning, Worker: "w1", At: at(0)}
	success := kv.Move{From: kv.StateRunning, To: kv.StateSucceeded, Worker: "w1", At: at(25)}

	c := build(at(30), []kv.Move{claim}).effects()
	require.Equal(t, 1, c.afterKillBeforeOutcome, "%s", c)
	require.Empty(t, c.unexplained)
	afterKill, _, _, unexplained := build(at(30), []kv.Move{claim}).reexecutions()
	require.Equal(t, 1, afterKill)
	require.Empty(t, unexplained)

	for name, j := range map[string]*journal{
		"the trail shows its outcome":        build(at(30), []kv.Move{claim, success}),
		"the trail was not read":             build(at(30), nil),
		"its worker died after the rerun":    build(at(200), []kv.Move{claim}),
		"its worker died before it finished": build(at(15), []kv.Move{claim}),
	} {
		require.Equal(t, []string{"t"}, j.effects().unexplained, name)
		_, _, _, unexplained := j.reexecutions()
		require.Equal(t, []string{"t"}, unexplained, name)
	}
}
