package streams

import (
	"errors"
	"github.com/ax-mesh/ax/axtype"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrCodeBucketFull is the server's err_code for a publish that a full bucket
// refuses: the stream holds its MaxMsgs and discards new messages.
const ErrCodeBucketFull jetstream.ErrorCode = 10077

var (
	// ErrInvalidToken means a value cannot be used as a subject token.
	ErrInvalidToken = errors.New("invalid subject token")
	// ErrBadSubject means a message subject does not follow the wire contract.
	ErrBadSubject = errors.New("bad task subject")
	// ErrBadPriority means a priority is not p0..p4.
	ErrBadPriority = axtype.ErrBadPriority // [axtype.ErrBadPriority]
	// ErrBadHeader means a message header does not follow the wire contract.
	ErrBadHeader = errors.New("bad task header")
	// ErrLayoutChange means provisioning would change the data layout of an
	// existing stream (its shard transform or subjects), which it refuses.
	ErrLayoutChange = errors.New("refusing to change the data layout of an existing stream")
	// ErrTooLarge means a task's message would not fit a write ax makes of
	// it (its bucket, AX_DELAYED, the server's max_payload) with the
	// headers ax adds.
	ErrTooLarge = errors.New("task message too large")
	// ErrImmutable means an existing stream or consumer differs in a setting
	// the server cannot update in place.
	ErrImmutable = errors.New("setting cannot be changed on an existing stream or consumer")
)

// IsRevisionMismatch reports whether err is a failed compare-and-set on a
// KV or stream subject revision: err_code 10071 on one replica, 10164 on a
// replicated stream, as either a KV error or a publish API error.
func IsRevisionMismatch(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}
