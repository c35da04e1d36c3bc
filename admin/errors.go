package admin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ax-mesh/ax/internal/kv"
)

// Error codes of the management API, sent in the Nats-Service-Error-Code
// header (HTTP-like, so that the nats CLI shows familiar numbers).
const (
	CodeBadRequest = 400 // malformed JSON, bad id, bad filter or priority
	CodeNotFound   = 404 // unknown task or dead letter
	CodeConflict   = 409 // illegal transition from the task's current state, or a lost race
	CodeTooLarge   = 413 // the reply would exceed the server's max_payload and cannot be cut
	CodeInternal   = 500 // NATS or JetStream failed; retrying may help
)

// Error is an error of the management API: a code and a message that
// says what to do. It is the JSON body of an error reply too.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Error formats the code and the message, e.g. "404: get task x: unknown task".
func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// Is matches another *Error with the same code, so that callers can
// test errors.Is(err, &Error{Code: CodeNotFound}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func badRequest(format string, args ...any) error {
	return &Error{Code: CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &Error{Code: CodeConflict, Message: fmt.Sprintf(format, args...)}
}

// toError maps store errors to codes with actionable messages.
func toError(err error) *Error {
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, kv.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: err.Error() + ": check the id; a task published but not yet taken by a worker has no record yet: cancel and pause take --unseen (unseen) for it"}
	case errors.Is(err, kv.ErrConflict):
		return &Error{Code: CodeConflict, Message: err.Error() + ": the task kept changing while this action ran; read it again and retry"}
	case errors.Is(err, kv.ErrForeignRecord):
		return &Error{Code: CodeConflict, Message: err.Error() + ": the task's record key holds something ax did not write there (docs/SECURITY.md, \"What a forged value does\"): the worker that takes the task's message rebuilds its record; a finished task's state is lost"}
	case errors.Is(err, kv.ErrIllegalTransition), errors.Is(err, kv.ErrWrongState):
		return &Error{Code: CodeConflict, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: err.Error() + ": check the NATS server and retry"}
}

// illegal explains why action cannot apply to a task in state from, listing
// the states it applies to: only, or else those the transition table allows.
func illegal(id, action string, from, to kv.State, only ...kv.State) error {
	var ok []string
	for _, s := range kv.States() {
		if len(only) == 0 && kv.CanTransition(s, to) && s != to || slices.Contains(only, s) {
			ok = append(ok, string(s))
		}
	}
	return conflict("task %s is %s: %s applies only to %s tasks (illegal transition %s -> %s)",
		id, from, action, strings.Join(ok, ", "), from, to)
}

// maxMoveTries bounds the re-reads of an action that loses a
// compare-and-set; after them the action answers 409.
const maxMoveTries = 8
