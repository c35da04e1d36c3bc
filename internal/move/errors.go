package move

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrBucketFull means the target bucket refused the move's copy because it
// holds its limit of messages or bytes (err_code 10077): nothing was
// written, and the move can be made again once the bucket drains. A
// [BucketFullError] matches it.
var ErrBucketFull = errors.New("bucket full")

// errLostReply is what [TestConfig.LoseWriteReply] makes a move see.
var errLostReply = errors.New("compare-and-set reply lost (test)")

// BucketFullError is the error of a move whose copy its target bucket
// refused because it is full; it matches [ErrBucketFull] and unwraps to the
// server's error.
type BucketFullError struct {
	// Stream is the bucket that refused the copy.
	Stream string
	// Err is the server's answer.
	Err *jetstream.APIError
}

// Error says which bucket is full and what to do, as an operator reads it.
func (e *BucketFullError) Error() string {
	return fmt.Sprintf("bucket %s is full (%s); retry when it drains", e.Stream, e.Err.Description)
}

// Is reports whether target is [ErrBucketFull].
func (e *BucketFullError) Is(target error) bool { return target == ErrBucketFull }

// Unwrap returns the server's error.
func (e *BucketFullError) Unwrap() error { return e.Err }
