package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// CheckRetention refuses a record retention shorter than the de-duplication
// window of any priority stream that exists. A task id submitted again
// within the window is de-duplicated by the stream (no new message), while
// an expired record lets the submit write a new READY record: a task with a
// record and no message. Records outlive the window when Retention is at
// least the window, because a record expires Retention after its final
// write and the window counts from the earlier publish. -1 (keep forever)
// passes; a stream not provisioned yet is not checked.
func CheckRetention(ctx context.Context, js jetstream.JetStream, names streams.Names, retention time.Duration) error {
	if retention <= 0 {
		return nil
	}
	for p := range streams.Priorities {
		name := names.PriorityStream(p)
		stream, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("check record retention: bind %s: %w", name, err)
		}
		if window := stream.CachedInfo().Config.Duplicates; retention < window {
			return fmt.Errorf("%w: record Retention %s is shorter than the de-duplication window %s of %s: a task re-submitted after its record expired would get a READY record and no message; set Retention to at least %s or shorten the window",
				ErrRetentionTooShort, retention, window, name, window)
		}
	}
	return nil
}
