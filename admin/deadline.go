package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// UnservedDeadlineRequest sets, changes or removes (Deadline 0) the
// deadline of one task type, or with Type [AnyUnservedType] of every type
// without its own ([UnservedDeadlines]); with no Type it only reads the
// table.
type UnservedDeadlineRequest struct {
	Type     string          `json:"type,omitempty"`
	Deadline axtype.Duration `json:"deadline,omitempty"`
}

// unservedDeadline serves [VerbUnservedDeadline]: it writes the table by
// compare-and-set, so two operators' changes never undo each other, and
// answers the table as it is after the change.
func (a *Service) unservedDeadline(ctx context.Context, data []byte) (any, error) {
	var req UnservedDeadlineRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	d := time.Duration(req.Deadline)
	switch {
	case req.Type == "" && d != 0:
		return nil, badRequest("a deadline needs the task type it applies to (or %q for every type)", control.AnyUnservedType)
	case req.Type != "" && req.Type != control.AnyUnservedType:
		if err := streams.ValidateToken("type", req.Type); err != nil {
			return nil, badRequest("%s", err.Error())
		}
	}
	if d != 0 && (d < control.MinUnservedDeadline || d > control.MaxUnservedDeadline) {
		return nil, badRequest("deadline %s: want 0 (none) or between %s and %s", d, control.MinUnservedDeadline, control.MaxUnservedDeadline)
	}
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	for range maxMoveTries {
		table, rev, err := control.ReadUnservedDeadlines(ctx, board)
		if errors.Is(err, control.ErrUndecodableDeadlines) && req.Type != "" {
			a.log.Warn("unserved_deadlines_replaced", zap.Error(err)) // written by hand: a change starts a new table
			err = nil
		}
		if err != nil || req.Type == "" {
			return &table, err
		}
		if d == 0 {
			delete(table.Deadlines, req.Type)
		} else {
			table.Deadlines[req.Type] = req.Deadline
		}
		value, err := json.Marshal(table)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", control.UnservedDeadlinesKey, err)
		}
		if rev == 0 {
			_, err = board.Create(ctx, control.UnservedDeadlinesKey, value)
		} else {
			_, err = board.Update(ctx, control.UnservedDeadlinesKey, value, rev)
		}
		if kv.IsRevisionMismatch(err) || errors.Is(err, jetstream.ErrKeyExists) {
			continue // another operator changed it: apply the change to theirs
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", control.UnservedDeadlinesKey, err)
		}
		a.log.Info("unserved_deadline_set", zap.String("type", req.Type), zap.Duration("deadline", d))
		return &table, nil
	}
	return nil, fmt.Errorf("write %s: %w", control.UnservedDeadlinesKey, kv.ErrConflict)
}

// unservedDeadlines fills in the deadline of each unserved type.
func (a *Service) unservedDeadlines(ctx context.Context, unserved []kv.Unserved) error {
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	table, _, err := control.ReadUnservedDeadlines(ctx, board)
	if err != nil {
		return err
	}
	for i := range unserved {
		d, ok := table.Deadlines[unserved[i].Type]
		if !ok {
			d = table.Deadlines[control.AnyUnservedType]
		}
		unserved[i].Deadline = d
	}
	return nil
}

// SetUnservedDeadline sets the deadline of task type t (0 removes it) and
// returns the table of deadlines as it is now.
func (c *Client) SetUnservedDeadline(ctx context.Context, t string, d time.Duration) (*control.UnservedDeadlines, error) {
	return call[control.UnservedDeadlines](ctx, c, VerbUnservedDeadline, UnservedDeadlineRequest{Type: t, Deadline: axtype.Duration(d)})
}

// UnservedDeadlines returns the table of deadlines of unserved task types.
func (c *Client) UnservedDeadlines(ctx context.Context) (*control.UnservedDeadlines, error) {
	return call[control.UnservedDeadlines](ctx, c, VerbUnservedDeadline, UnservedDeadlineRequest{})
}
