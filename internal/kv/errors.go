package kv

import (
	"errors"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/streams"
)

var (
	// ErrNotFound means no record exists for the task (tenant and id).
	ErrNotFound = errors.New("unknown task")
	// ErrExists means a record already exists for the task (tenant and id).
	ErrExists = errors.New("task record already exists")
	// ErrIllegalTransition means the state machine forbids the move.
	ErrIllegalTransition = errors.New("illegal state transition")
	// ErrWrongState means the record is not in the state the caller expected.
	ErrWrongState = errors.New("task is not in the expected state")
	// ErrConflict means another writer changed the record since it was read
	// (the compare-and-set on the revision failed).
	ErrConflict = errors.New("task record changed concurrently")
	// ErrLeaseHeld means another holder owns the lease.
	ErrLeaseHeld = errors.New("lease held by another holder")
	// ErrLeaseLost means the caller's lease expired or was taken over.
	ErrLeaseLost = errors.New("lease lost")
	// ErrForeignKey means a key of the task record bucket is not of the
	// form <tenant>.<id> ([Ref.Key]): ax wrote no record there.
	ErrForeignKey = errors.New("not a task record key (<tenant>.<id>)")
	// ErrForeignRecord means a record key holds the record of another task
	// (its tenant or id differ): not a record ax wrote there.
	ErrForeignRecord = errors.New("record of another task")
	// ErrForeignLimits is [control.ErrForeignLimits].
	ErrForeignLimits = control.ErrForeignLimits
	// ErrRetentionTooShort means the record retention is shorter than the
	// de-duplication window of the priority streams ([CheckRetention]).
	ErrRetentionTooShort = errors.New("record retention shorter than the de-duplication window")
)

// IsRevisionMismatch reports whether err is a failed compare-and-set on a
// KV or stream subject revision ([streams.IsRevisionMismatch]).
func IsRevisionMismatch(err error) bool { return streams.IsRevisionMismatch(err) }
