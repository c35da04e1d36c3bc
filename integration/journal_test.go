package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/stretchr/testify/require"
)

// execution is one run of a probe task, from its journal lines.
type execution struct {
	task, worker string
	attempt      int
	start, end   time.Time // end: finish or abort, or the worker's death
	finished     bool
	aborted      bool // its context ended (timeout, cancel, a lapsed claim)
}

// journal is what every probe worker wrote.
type journal struct {
	executions map[string][]execution // by task
	effects    map[string]int         // effect lines by task
}

// readJournals parses every *.jsonl file in dir. A worker killed mid-line
// leaves a torn last line, which is skipped. deaths maps a worker id to
// when it was killed; an execution without a finish ends there.
func readJournals(t *testing.T, dir string, deaths map[string]time.Time) *journal {
	t.Helper()
	j := &journal{executions: map[string][]execution{}, effects: map[string]int{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	type key struct {
		task, worker string
		attempt      int
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
			k := key{ev.Task, ev.Worker, ev.Attempt}
			switch ev.Event {
			case "start":
				open[k] = &execution{task: ev.Task, worker: ev.Worker, attempt: ev.Attempt, start: time.Unix(0, ev.At)}
				order = append(order, k)
			case "finish":
				if e := open[k]; e != nil {
					e.end, e.finished = time.Unix(0, ev.At), true
				}
			case "abort":
				if e := open[k]; e != nil {
					e.end, e.aborted = time.Unix(0, ev.At), true
				}
			case "effect":
				j.effects[ev.Task]++
			}
		}
		require.NoError(t, f.Close())
	}
	for _, k := range order {
		e := open[k]
		if !e.finished && !e.aborted {
			death, ok := deaths[e.worker]
			if !ok {
				death = time.Now() // still running, or stopped by a signal
			}
			e.end = death
		}
		j.executions[e.task] = append(j.executions[e.task], *e)
	}
	for task := range j.executions {
		slices.SortFunc(j.executions[task], func(a, b execution) int { return a.start.Compare(b.start) })
	}
	return j
}

// overlaps counts tasks with two executions running at the same time.
func (j *journal) overlaps() []string {
	var out []string
	for task, runs := range j.executions {
		for i := 1; i < len(runs); i++ {
			if runs[i].start.Before(runs[i-1].end) {
				out = append(out, task)
				break
			}
		}
	}
	return out
}

// reexecutions counts executions beyond the first of each task: those
// after the previous execution's worker was killed, those after the
// previous execution was aborted by its own worker (its claim lapsed: it
// stopped itself and applied no effect), and the tasks where a
// re-execution has neither explanation.
func (j *journal) reexecutions(deaths map[string]time.Time) (afterKill, afterAbort int, unexplained []string) {
	for task, runs := range j.executions {
		for i := 1; i < len(runs); i++ {
			death, killed := deaths[runs[i-1].worker]
			switch {
			case killed && !death.After(runs[i].start):
				afterKill++
			case runs[i-1].aborted && !runs[i-1].end.After(runs[i].start):
				afterAbort++
			default:
				unexplained = append(unexplained, task)
			}
		}
	}
	return afterKill, afterAbort, unexplained
}
