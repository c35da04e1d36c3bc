package worker

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/ax-mesh/ax/internal/kv"
)

// DefaultMaxResultBytes is the default of [Config.MaxResultBytes]: 64 KiB.
const DefaultMaxResultBytes = 64 << 10

// SetResult sets the task's result: the bytes stored in its record when
// this attempt succeeds, in the same compare-and-set that makes it
// SUCCEEDED, and kept for the record's retention (a producer reads them
// with ax's Client.Result or Client.Wait, `ax task result ID`, or the nats
// CLI: docs/WIRE.md). A later call replaces the result; nil clears it. The
// result of an attempt that fails is dropped. A result larger than
// [Config.MaxResultBytes], or one that would make the record larger than
// the server takes, fails the attempt with a permanent error naming the
// bound ([ErrResultTooLarge]): the same handler would return the same
// result again, so retrying cannot help.
func (t *Task) SetResult(result []byte) { t.result = result }

// SetResultJSON sets the task's result to the JSON form of v, as
// [Task.SetResult] does. It returns the encoding error, leaving the result
// as it was.
func (t *Task) SetResultJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("set result of task %s: %w", t.ID, err)
	}
	t.result = data
	return nil
}

// ResultLimit returns the largest result the worker running the task takes
// ([Config.MaxResultBytes]), or 0 for a Task not run by a worker (a test's).
func (t *Task) ResultLimit() int { return t.resultLimit }

// Result returns the result set so far with [Task.SetResult] (for
// middleware and tests), or nil.
func (t *Task) Result() []byte { return t.result }

// checkResult returns the permanent error of a result too large for the
// worker's bound or for the record (rec as it would be written, in bytes
// below maxRecord; zero: unchecked).
func checkResult(rec *kv.Record, result []byte, bound, maxRecord int) error {
	if len(result) == 0 {
		return nil
	}
	if len(result) > bound {
		return Permanent(fmt.Errorf("%w: %d bytes, above the worker's MaxResultBytes (%d bytes)", ErrResultTooLarge, len(result), bound))
	}
	if maxRecord <= 0 {
		return nil
	}
	next := *rec
	next.Result = result
	// Room for the trail move the outcome adds: at most an error of
	// kv.MaxErrorLen and its fields.
	if size := kv.EncodedSize(&next) + kv.MaxErrorLen + 512; size > maxRecord {
		return Permanent(fmt.Errorf("%w: %d bytes (%d in base64) make the task's record %d bytes, above the %d the server takes (max_payload)",
			ErrResultTooLarge, len(result), base64.StdEncoding.EncodedLen(len(result)), size, maxRecord))
	}
	return nil
}
