package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"strconv"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// WorkflowInfo describes a submitted workflow.
type WorkflowInfo struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Tasks is how many tasks the workflow holds.
	Tasks int `json:"tasks"`
	// Sequence is its document's sequence in AX_WORKFLOWS.
	Sequence uint64 `json:"sequence"`
	// Duplicate is set when the tenant already has a workflow of this id:
	// nothing was stored, and the one stored runs (a retried submit of
	// the same workflow is such a duplicate).
	Duplicate bool `json:"duplicate,omitempty"`
}

// SubmitWorkflow stores the workflow, all or nothing: once it returns nil
// every task of it runs as its parents allow (the leader releases each
// task once each of its parents SUCCEEDED); an error that does not match
// [ErrMaybeStored] means none will. The workflow is checked first
// ([Workflow.Validate]) and stored as one document, its commit: a
// submitter stopped before it leaves nothing behind. A workflow id that
// its tenant already used is [WorkflowInfo.Duplicate], and nothing is
// stored. An error matching [ErrMaybeStored] (the acknowledgement could
// not be read) may have stored it: submit it again, with the same id.
func (c *Client) SubmitWorkflow(ctx context.Context, wf *Workflow) (info WorkflowInfo, err error) {
	norm, err := wf.normalize(time.Now())
	if err != nil {
		return WorkflowInfo{ID: wf.ID, Tenant: wf.Tenant}, err
	}
	ctx, span := c.traceWorkflow(ctx, norm)
	defer func() { endSpan(span, err) }()
	info = WorkflowInfo{ID: norm.ID, Tenant: norm.Tenant, Tasks: len(norm.Tasks)}
	for _, t := range norm.Tasks {
		if err := c.bounds(t.Spec, time.Now()); err != nil {
			return info, fmt.Errorf("%w %q: task %q: %w", ErrInvalidWorkflow, norm.ID, t.Name, err)
		}
	}
	data, err := json.Marshal(norm)
	if err != nil {
		return info, fmt.Errorf("submit workflow %s: encode: %w", norm.ID, err)
	}
	if len(data) > MaxWorkflowBytes {
		return info, fmt.Errorf("%w %q: its document is %d bytes, more than the %d a workflow holds",
			ErrInvalidWorkflow, norm.ID, len(data), MaxWorkflowBytes)
	}
	subject := c.cfg.Names.WorkflowSubject(norm.Tenant, norm.ID)
	var ack *jetstream.PubAck
	if part := c.js.Conn().MaxPayload() - streams.HeaderRoom; part > 0 && int64(len(data)) > part {
		ack, err = c.submitWorkflowParts(ctx, norm, data, int(part))
	} else {
		msg := nats.NewMsg(subject)
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, norm.Tenant+"/"+norm.ID)
		for attempt := 0; ; attempt++ {
			ack, err = c.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0))
			if err == nil || !retryable(err) || attempt >= c.cfg.PublishRetries || ctx.Err() != nil {
				break
			}
		}
	}
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		info.Sequence, info.Duplicate = ack.Sequence, ack.Duplicate
		return info, nil
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		info.Duplicate = true // the tenant's id is taken: by this workflow, submitted before, or another
		return info, nil
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishNotEnabled:
		return info, fmt.Errorf("submit workflow %s: its %d-byte document is stored in parts, which %s refuses (%w): provision the deployment (ax provision) with this version of ax",
			norm.ID, len(data), c.cfg.Names.WorkflowStream(), err)
	case errors.As(err, &apiErr):
		return info, fmt.Errorf("submit workflow %s: %w", norm.ID, err)
	case errors.Is(err, errPartsNotSent):
		return info, fmt.Errorf("submit workflow %s: %w", norm.ID, err)
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return info, fmt.Errorf("submit workflow %s: no stream stored %s (%w): provision the deployment (ax provision) with this version of ax", norm.ID, subject, err)
	}
	return info, fmt.Errorf("submit workflow %s: published; its acknowledgement could not be read: %w (%w)", norm.ID, err, ErrMaybeStored)
}

// errPartsNotSent means a part of a document could not be sent: nothing of
// it is stored (the server drops a batch left without its commit).
var errPartsNotSent = errors.New("a part of the document was not sent; nothing of it is stored")

// submitWorkflowParts stores the document data of norm in parts of at most
// size bytes and its commit, one atomic batch (docs/WIRE.md, "Workflows").
// The commit carries the parts' count and digest, and expects no document
// of the tenant's id before it, as a document in one message does.
func (c *Client) submitWorkflowParts(ctx context.Context, norm *Workflow, data []byte, size int) (*jetstream.PubAck, error) {
	parts := streams.SplitWorkflowDocument(data, size)
	if len(parts) > streams.MaxWorkflowParts {
		return nil, fmt.Errorf("%w %q: its %d-byte document takes %d parts of %d bytes, more than the %d one batch holds: raise the server's max_payload",
			ErrInvalidWorkflow, norm.ID, len(data), len(parts), size, streams.MaxWorkflowParts)
	}
	batch, err := jetstreamext.NewBatchPublisher(c.js)
	if err != nil {
		return nil, err
	}
	for k, part := range parts {
		msg := nats.NewMsg(c.cfg.Names.WorkflowPartSubject(norm.Tenant, norm.ID))
		msg.Data = part
		msg.Header.Set(streams.WorkflowPartHeader, strconv.Itoa(k+1))
		if err := batch.AddMsg(msg); err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				return nil, err // the server's refusal of the batch
			}
			return nil, fmt.Errorf("%w (part %d of %d): %w", errPartsNotSent, k+1, len(parts), err)
		}
	}
	commit := nats.NewMsg(c.cfg.Names.WorkflowSubject(norm.Tenant, norm.ID))
	commit.Header.Set(streams.WorkflowPartsHeader, strconv.Itoa(len(parts)))
	commit.Header.Set(streams.WorkflowDigestHeader, streams.WorkflowDigest(data))
	commit.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	ack, err := batch.CommitMsg(ctx, commit)
	if err != nil {
		return nil, err
	}
	return &jetstream.PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Domain: ack.Domain}, nil
}
