package kv

import (
	"context"
	"fmt"
)

// SetProgress writes p as the progress of the RUNNING task rec, read at
// revision rev, in one compare-and-set that moves nothing: no trail move,
// the same state and UpdatedAt. It returns the new record and revision, or
// [ErrWrongState] if rec is not RUNNING and [ErrConflict] if another writer
// (an operator's cancel, a later claim) moved the record since rev: the
// writer no longer holds the task.
func (s *Store) SetProgress(ctx context.Context, rec *Record, rev uint64, p *Progress) (*Record, uint64, error) {
	if rec.State != StateRunning {
		return nil, 0, fmt.Errorf("set progress of task %s: it is %s: %w", rec.Ref(), rec.State, ErrWrongState)
	}
	next := *rec
	next.Progress = p
	newRev, err := s.kv.Update(ctx, rec.Ref().Key(), encodeRecord(&next), rev)
	if IsRevisionMismatch(err) {
		return nil, 0, fmt.Errorf("set progress of task %s at revision %d: %w", rec.Ref(), rev, ErrConflict)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("set progress of task %s: %w", rec.Ref(), err)
	}
	return &next, newRev, nil
}

// EncodedSize is the size of rec's JSON form in the bucket, in bytes.
func EncodedSize(rec *Record) int { return len(encodeRecord(rec)) }
