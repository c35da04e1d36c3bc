package worker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
)

// DefaultProgressEvery is the default of [Config.ProgressEvery].
const DefaultProgressEvery = time.Second

// Progress reports how far the task has come: percent (0 to 100) and a
// short note (cut to [kv.MaxProgressNote] bytes). It is written to the
// task's record (`ax task get`, `ax task watch`, the dashboard) at most
// once per [Config.ProgressEvery] per task: a report within that time of
// the last write is kept and written with the next one, or with the
// attempt's outcome, so the last report is never lost and a chatty
// handler costs one write a second. A write is fenced like the worker's
// own: an attempt that no longer holds its task ([Task.Held] false)
// writes nothing and gets an error wrapping the context's cause or
// [ErrClaimLapsed]; a record moved by someone else (an operator's cancel)
// gives an error wrapping [kv.ErrConflict]. Either way the handler should
// stop. Progress is kept after the task ends; a retried task shows its
// last attempt's progress until the new attempt reports.
func (t *Task) Progress(ctx context.Context, percent float64, note string) error {
	if math.IsNaN(percent) || percent < 0 || percent > 100 {
		return fmt.Errorf("progress of task %s: percent %v is not 0..100", t.ID, percent)
	}
	p := &kv.Progress{Percent: percent, Note: cutNote(note), At: time.Now().UTC()}
	if t.exec == nil { // a Task built by a test: keep it
		t.progress = p
		return nil
	}
	return t.exec.report(ctx, t, p)
}

// LastProgress returns the last progress reported with [Task.Progress], or
// nil.
func (t *Task) LastProgress() *kv.Progress {
	if t.exec == nil {
		return t.progress
	}
	t.exec.mu.Lock()
	defer t.exec.mu.Unlock()
	return t.exec.last
}

func cutNote(note string) string {
	if len(note) <= kv.MaxProgressNote {
		return note
	}
	return truncateUTF8(note, kv.MaxProgressNote)
}

func truncateUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// attemptRecord is a running attempt's view of its record: progress writes
// move its revision, and the outcome is written from the last one.
type attemptRecord struct {
	rn    *runner
	mu    sync.Mutex
	rec   *kv.Record
	rev   uint64
	last  *kv.Progress // the last report
	wrote time.Time    // when a report was last written
	dirty bool         // last is not written yet
	ended bool         // the attempt's outcome is being written: no more progress writes
}

// report keeps p and writes it unless the last write is too recent.
func (e *attemptRecord) report(ctx context.Context, t *Task, p *kv.Progress) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return fmt.Errorf("progress of task %s: the attempt has ended: %w", t.ID, context.Cause(ctx))
	}
	if !t.Held() { // fenced: not kept, not folded into the outcome
		cause := context.Cause(ctx)
		if cause == nil {
			cause = ErrClaimLapsed
		}
		return fmt.Errorf("progress of task %s: %w", t.ID, cause)
	}
	e.last, e.dirty = p, true
	if time.Since(e.wrote) < e.rn.cfg.ProgressEvery {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	rec, rev, err := e.rn.store.SetProgress(wctx, e.rec, e.rev, p)
	if err != nil {
		return fmt.Errorf("progress of task %s: %w", t.ID, err)
	}
	e.rec, e.rev, e.wrote, e.dirty = rec, rev, time.Now(), false
	return nil
}

// end stops progress writes and returns the record and revision the
// outcome is written from, and the progress to fold into it (nil: nothing
// unwritten).
func (e *attemptRecord) end() (*kv.Record, uint64, *kv.Progress) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended = true
	if e.dirty {
		return e.rec, e.rev, e.last
	}
	return e.rec, e.rev, nil
}
