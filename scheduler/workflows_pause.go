package scheduler

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// confirmPause writes, once, that the leader has seen a workflow's pause
// mark ([control.WorkflowPause].SeenAt), at the revision it saw. It runs
// on the loop that releases the tasks, which submits a release whole
// before it reads the next change: when the mark is seen no release is
// under way, and release skips a paused workflow from then on. So once
// the mark says seen, what was released before it is all of the workflow
// that runs until the resume; workflow.pause waits for it. A mark that
// changed meanwhile (resumed) is left as it is.
func (w *workflowLoop) confirmPause(ctx context.Context, board jetstream.KeyValue, entry jetstream.KeyValueEntry) {
	if board == nil || entry.Operation() != jetstream.KeyValuePut {
		return
	}
	var pause control.WorkflowPause
	if json.Unmarshal(entry.Value(), &pause) != nil || pause.PausedAt.IsZero() {
		pause = control.WorkflowPause{PausedAt: entry.Created()} // a value written by hand
	}
	if pause.SeenAt != nil {
		return
	}
	now := time.Now().UTC()
	pause.SeenAt = &now
	value, err := json.Marshal(pause)
	if err == nil {
		_, err = board.Update(ctx, entry.Key(), value, entry.Revision())
	}
	if err != nil && !kv.IsRevisionMismatch(err) {
		w.log.Warn("workflow_pause_unconfirmed", zap.String("key", entry.Key()), zap.Error(err))
	}
}
