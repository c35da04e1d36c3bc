package ax

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

var (
	// ErrOverloaded means the task's bucket is full (err_code 10077) or
	// backpressure refuses non-core tasks; retry later with the same id.
	ErrOverloaded = errors.New("ax overloaded: the priority bucket refuses new tasks")
	// ErrInvalidTask means a task fails validation; the message names the field.
	ErrInvalidTask = errors.New("invalid task")
	// ErrCronNotFound means no cron job has the name.
	ErrCronNotFound = errors.New("no such cron job")
	// ErrMaybeStored means a submit failed after its task was published:
	// the acknowledgement could not be read (a timeout, a lost connection,
	// a refused reply inbox, a cancelled context) or the record was not
	// written after it. The task may be stored and run: submitting it again
	// with the same id is safe (the bucket drops a duplicate within its
	// window, a worker drops a task it has seen), with a new id it may run
	// twice.
	ErrMaybeStored = errors.New("the task may be stored")
)

// BatchError reports the tasks of a [Client.SubmitBatch] that were not
// accepted, by index. The others were accepted.
type BatchError struct {
	Failed map[int]error
}

func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b strings.Builder
	fmt.Fprintf(&b, "submit batch: %d tasks not accepted", len(idx))
	for n, i := range idx {
		if n == 3 {
			b.WriteString(", …")
			break
		}
		fmt.Fprintf(&b, "; task %d: %s", i, e.Failed[i].Error())
	}
	return b.String()
}

// Is reports whether any failure matches target, so that
// errors.Is(err, ErrOverloaded) works on a batch.
func (e *BatchError) Is(target error) bool {
	for _, err := range e.Failed {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
