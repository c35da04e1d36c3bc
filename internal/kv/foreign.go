package kv

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ForeignError is a task record key that holds a value ax did not write
// there: one that does not decode as a record, or the record of another
// task. Under a deployment whose producers share the AX account, the
// server writes a publish acknowledgement ({"stream":"AX_P2","seq":12})
// to any key a producer names as its reply subject (docs/SECURITY.md). It
// matches [ErrForeignRecord]; [Store.Repair] rebuilds the record.
type ForeignError struct {
	Ref      Ref
	Revision uint64
	// Value is the value found, at most [ForeignValueLen] bytes of it.
	Value []byte
	// Err says why it is not the task's record.
	Err error
}

// ForeignValueLen is how much of a foreign value a [ForeignError] and a
// repair's trail keep.
const ForeignValueLen = 256

func (e *ForeignError) Error() string {
	return fmt.Sprintf("task record %s (revision %d) holds a value ax did not write there: %s (%s)", e.Ref, e.Revision, e.Err.Error(), strconv.Quote(string(e.Value)))
}

// Is reports whether target is [ErrForeignRecord].
func (e *ForeignError) Is(target error) bool { return target == ErrForeignRecord }

// Unwrap returns why the value is not the task's record.
func (e *ForeignError) Unwrap() error { return e.Err }

// newForeignError describes value, found at ref's key at revision rev.
func newForeignError(ref Ref, rev uint64, value []byte, err error) *ForeignError {
	return &ForeignError{Ref: ref, Revision: rev, Value: append([]byte(nil), value[:min(len(value), ForeignValueLen)]...), Err: err}
}

// RepairAction is the [Move.Action] of the first move of a repaired record.
const RepairAction = "repair"

// Repair writes rec, a record rebuilt from the task's message, over the
// foreign value found (a [ForeignError]), by compare-and-set on its
// revision: the record is born anew in rec.State (READY or PENDING, say),
// and its trail starts with a move of action [RepairAction] whose error
// names the value replaced. What the foreign value overwrote (the earlier
// trail, the attempts made) is lost. It returns [ErrConflict] if the key
// changed since.
func (s *Store) Repair(ctx context.Context, found *ForeignError, rec *Record, actor Actor) (*Record, uint64, error) {
	if rec.Ref() != found.Ref {
		return nil, 0, fmt.Errorf("repair task %s: the rebuilt record names task %s", found.Ref, rec.Ref())
	}
	actor.Action = RepairAction
	actor.Error = fmt.Sprintf("record key held a value ax did not write there (revision %d: %s); rebuilt from the task's message: earlier trail and attempts lost",
		found.Revision, found.Value)
	next, data, err := s.birth(rec, actor)
	if err != nil {
		return nil, 0, fmt.Errorf("repair task %s: %w", found.Ref, err)
	}
	var ttl time.Duration
	if s.expires(next.State) {
		ttl = s.cfg.Retention
	}
	rev, err := s.compareAndSet(ctx, found.Ref.Key(), data, found.Revision, ttl)
	if IsRevisionMismatch(err) {
		return nil, 0, fmt.Errorf("repair task %s at revision %d: %w", found.Ref, found.Revision, ErrConflict)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("repair task %s: %w", found.Ref, err)
	}
	s.mirror(next)
	return next, rev, nil
}
