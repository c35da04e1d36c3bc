package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// UnservedDeadlineRequest sets, changes or removes (Deadline 0) the
// deadline of one task type, or with Type [AnyUnservedType] of every type
// without its own ([UnservedDeadlines]); with no Type it only reads the
// table.
type UnservedDeadlineRequest struct {
	Type     string      `json:"type,omitempty"`
	Deadline kv.Duration `json:"deadline,omitempty"`
}

// unservedDeadline serves [VerbUnservedDeadline]: it writes the table by
// compare-and-set, so two operators' changes never undo each other, and
// answers the table as it is after the change.
func (a *Admin) unservedDeadline(ctx context.Context, data []byte) (any, error) {
	var req UnservedDeadlineRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	d := time.Duration(req.Deadline)
	switch {
	case req.Type == "" && d != 0:
		return nil, badRequest("a deadline needs the task type it applies to (or %q for every type)", AnyUnservedType)
	case req.Type != "" && req.Type != AnyUnservedType:
		if err := streams.ValidateToken("type", req.Type); err != nil {
			return nil, badRequest("%s", err.Error())
		}
	}
	if d != 0 && (d < MinUnservedDeadline || d > MaxUnservedDeadline) {
		return nil, badRequest("deadline %s: want 0 (none) or between %s and %s", d, MinUnservedDeadline, MaxUnservedDeadline)
	}
	control, err := a.js.KeyValue(ctx, a.cfg.Names.ControlBucket())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	for range maxMoveTries {
		table, rev, err := readDeadlines(ctx, control)
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
			return nil, fmt.Errorf("encode %s: %w", UnservedDeadlinesKey, err)
		}
		if rev == 0 {
			_, err = control.Create(ctx, UnservedDeadlinesKey, value)
		} else {
			_, err = control.Update(ctx, UnservedDeadlinesKey, value, rev)
		}
		if kv.IsRevisionMismatch(err) || errors.Is(err, jetstream.ErrKeyExists) {
			continue // another operator changed it: apply the change to theirs
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", UnservedDeadlinesKey, err)
		}
		a.log.Info("unserved_deadline_set", zap.String("type", req.Type), zap.Duration("deadline", d))
		return &table, nil
	}
	return nil, fmt.Errorf("write %s: %w", UnservedDeadlinesKey, kv.ErrConflict)
}

// unservedDeadlines fills in the deadline of each unserved type.
func (a *Admin) unservedDeadlines(ctx context.Context, unserved []kv.Unserved) error {
	control, err := a.js.KeyValue(ctx, a.cfg.Names.ControlBucket())
	if err != nil {
		return fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	table, _, err := readDeadlines(ctx, control)
	if err != nil {
		return err
	}
	for i := range unserved {
		d, ok := table.Deadlines[unserved[i].Type]
		if !ok {
			d = table.Deadlines[AnyUnservedType]
		}
		unserved[i].Deadline = d
	}
	return nil
}

// readDeadlines reads the table and its revision (0: not written yet).
func readDeadlines(ctx context.Context, control jetstream.KeyValue) (UnservedDeadlines, uint64, error) {
	entry, err := control.Get(ctx, UnservedDeadlinesKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return UnservedDeadlines{Deadlines: map[string]kv.Duration{}}, 0, nil
	}
	if err != nil {
		return UnservedDeadlines{}, 0, fmt.Errorf("read %s: %w", UnservedDeadlinesKey, err)
	}
	out := UnservedDeadlines{}
	if err := json.Unmarshal(entry.Value(), &out); err != nil {
		return out, 0, fmt.Errorf("decode %s: %w", UnservedDeadlinesKey, err)
	}
	if out.Deadlines == nil {
		out.Deadlines = map[string]kv.Duration{}
	}
	return out, entry.Revision(), nil
}

// SetUnservedDeadline sets the deadline of task type t (0 removes it) and
// returns the table of deadlines as it is now.
func (c *AdminClient) SetUnservedDeadline(ctx context.Context, t string, d time.Duration) (*UnservedDeadlines, error) {
	return call[UnservedDeadlines](ctx, c, VerbUnservedDeadline, UnservedDeadlineRequest{Type: t, Deadline: kv.Duration(d)})
}

// UnservedDeadlines returns the table of deadlines of unserved task types.
func (c *AdminClient) UnservedDeadlines(ctx context.Context) (*UnservedDeadlines, error) {
	return call[UnservedDeadlines](ctx, c, VerbUnservedDeadline, UnservedDeadlineRequest{})
}
