package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
func (c *Client) SubmitWorkflow(ctx context.Context, wf *Workflow) (WorkflowInfo, error) {
	norm, err := wf.normalize(time.Now())
	if err != nil {
		return WorkflowInfo{ID: wf.ID, Tenant: wf.Tenant}, err
	}
	info := WorkflowInfo{ID: norm.ID, Tenant: norm.Tenant, Tasks: len(norm.Tasks)}
	for _, t := range norm.Tasks {
		if err := c.bounds(t.Spec, time.Now()); err != nil {
			return info, fmt.Errorf("%w %q: task %q: %w", ErrInvalidWorkflow, norm.ID, t.Name, err)
		}
	}
	data, err := json.Marshal(norm)
	if err != nil {
		return info, fmt.Errorf("submit workflow %s: encode: %w", norm.ID, err)
	}
	if limit := c.js.Conn().MaxPayload() - streams.HeaderRoom; limit > 0 && int64(len(data)) > limit {
		return info, fmt.Errorf("%w %q: its document is %d bytes, more than the %d one message holds on this server (max_payload less %d)",
			ErrInvalidWorkflow, norm.ID, len(data), limit, streams.HeaderRoom)
	}
	msg := nats.NewMsg(c.cfg.Names.WorkflowSubject(norm.Tenant, norm.ID))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, norm.Tenant+"/"+norm.ID)
	var ack *jetstream.PubAck
	for attempt := 0; ; attempt++ {
		ack, err = c.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0))
		if err == nil || !retryable(err) || attempt >= c.cfg.PublishRetries || ctx.Err() != nil {
			break
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
	case errors.As(err, &apiErr):
		return info, fmt.Errorf("submit workflow %s: %w", norm.ID, err)
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return info, fmt.Errorf("submit workflow %s: no stream stored %s (%w): provision the deployment (ax provision) with this version of ax", norm.ID, msg.Subject, err)
	}
	return info, fmt.Errorf("submit workflow %s: published; its acknowledgement could not be read: %w (%w)", norm.ID, err, ErrMaybeStored)
}
