package builtin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ax-mesh/ax/worker"
)

// ExitArgs is the payload of the "exit" type.
type ExitArgs struct {
	Code int `json:"code"` // the process's exit status; 0: 3
}

// BigErrorArgs is the payload of the "bigerror" type.
type BigErrorArgs struct {
	Bytes     int  `json:"bytes"`               // the error's length; 0: 1 MiB
	Permanent bool `json:"permanent,omitempty"` // dead-letter at once instead of retrying
}

// RegisterFaults adds the fault-injection types of the fault suite to reg:
// "exit" ends the worker's process (os.Exit) from inside the handler, as a
// fatal runtime error, an OOM kill or a cgo fault would; "panic" panics;
// "bigerror" returns an error of payload.bytes bytes. Never register them
// in production: anyone allowed to submit them could stop the worker.
func RegisterFaults(reg *worker.Registry) error {
	return errors.Join(
		worker.HandleJSON(reg, "exit", Exit, nil),
		reg.Handle("panic", Panic, nil),
		worker.HandleJSON(reg, "bigerror", BigError, nil),
	)
}

// Exit ends the process with args.Code (3 if zero) without returning.
func Exit(_ context.Context, _ *worker.Task, args ExitArgs) error {
	os.Exit(cmp.Or(args.Code, 3))
	return nil
}

// Panic panics.
func Panic(_ context.Context, task *worker.Task) error {
	panic(fmt.Sprintf("panic: task %s panics by design", task.ID))
}

// BigError fails with an error of args.Bytes bytes (1 MiB if zero).
func BigError(_ context.Context, task *worker.Task, args BigErrorArgs) error {
	n := cmp.Or(args.Bytes, 1<<20)
	prefix := fmt.Sprintf("bigerror: task %s fails with a %d-byte error: ", task.ID, n)
	err := fmt.Errorf("%s%s: %w", prefix, strings.Repeat("x", max(0, n-len(prefix))), ErrInjected)
	if args.Permanent {
		return worker.Permanent(err)
	}
	return err
}
