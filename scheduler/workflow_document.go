package scheduler

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// document returns the workflow document msg (a message on a document's
// subject of AX_WORKFLOWS) commits: its body, or the parts stored just
// before it, put together and checked (streams.Names.WorkflowDocument). An
// error matching [streams.ErrWorkflowParts] means it is no workflow; any
// other is a read that failed.
func (w *workflowLoop) document(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
	if msg.Headers().Get(streams.WorkflowPartsHeader) == "" {
		return msg.Data(), nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		return nil, fmt.Errorf("workflows: %s: %w", msg.Subject(), err)
	}
	names := w.l.cfg.Names
	stream, err := w.l.js.Stream(ctx, names.WorkflowStream())
	if err != nil {
		return nil, fmt.Errorf("workflows: bind %s: %w", names.WorkflowStream(), err)
	}
	return names.WorkflowDocument(ctx, stream, meta.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data())
}
