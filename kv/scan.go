package kv

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// UnreadableError is a record [Store.Scan] met but could not decode.
type UnreadableError struct {
	Key      string // the task id
	Revision uint64
	Err      error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("task record %s (revision %d) does not decode: %s", e.Key, e.Revision, e.Err.Error())
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// Scan calls fn with every task record current when it starts, in one pass
// over the bucket, and unreadable with each record that does not decode
// (fn is not called for it). It stops at the first error fn returns, and
// when ctx ends.
func (s *Store) Scan(ctx context.Context, fn func(rec *Record, rev uint64) error, unreadable func(*UnreadableError)) error {
	watcher, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("scan task records: %w", err)
	}
	defer func() { _ = StopWatch(watcher) }()
	for {
		select {
		case entry := <-watcher.Updates():
			if entry == nil {
				return nil // every current record has been seen
			}
			var rec Record
			if err := json.Unmarshal(entry.Value(), &rec); err != nil {
				unreadable(&UnreadableError{Key: entry.Key(), Revision: entry.Revision(), Err: err})
				continue
			}
			if err := fn(&rec, entry.Revision()); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("scan task records: %w", ctx.Err())
		}
	}
}
