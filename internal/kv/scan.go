package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// errWatchClosed is why a watcher closed while its context had not ended.
var errWatchClosed = errors.New("closed by the client library")

// UnreadableError is a record [Store.Scan] met but could not decode.
type UnreadableError struct {
	Key      string // the record's key, "<tenant>.<id>" ([Ref.Key])
	Revision uint64
	Err      error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("task record %s (revision %d) does not decode: %s", e.Key, e.Revision, e.Err.Error())
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// readEntry decodes a watched record and checks that its key names it: a
// key without a tenant is [ErrForeignKey], a record of another task
// [ErrForeignRecord].
func readEntry(entry jetstream.KeyValueEntry) (*Record, error) {
	ref, err := ParseKey(entry.Key())
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		return nil, err
	}
	if rec.Ref() != ref {
		return nil, fmt.Errorf("the record names task %s: %w", rec.Ref(), ErrForeignRecord)
	}
	return &rec, nil
}

// Scan calls fn with every task record current when it starts, in one pass
// over the bucket, and unreadable with each record that does not decode
// (fn is not called for it). It stops at the first error fn returns, and
// when ctx ends.
//
// The keys are listed first ([ListKeys]) and those the watcher did not
// deliver by its initial-values mark are read directly ([CatchUp]).
func (s *Store) Scan(ctx context.Context, fn func(rec *Record, rev uint64) error, unreadable func(*UnreadableError)) error {
	keys, err := ListKeys(ctx, s.js, s.cfg.Names.TasksBucket(), "")
	if err != nil {
		return fmt.Errorf("scan task records: %w", err)
	}
	// Deletes too: a deleted record, listed by its marker, is then not
	// read again.
	watcher, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("scan task records: %w", err)
	}
	defer func() { _ = StopWatch(watcher) }()
	seen := make(map[string]bool, len(keys))
	visit := func(entry jetstream.KeyValueEntry) error {
		seen[entry.Key()] = true
		if entry.Operation() != jetstream.KeyValuePut {
			return nil // deleted: listed by its marker
		}
		rec, err := readEntry(entry)
		if err != nil {
			unreadable(&UnreadableError{Key: entry.Key(), Revision: entry.Revision(), Err: err})
			return nil
		}
		return fn(rec, entry.Revision())
	}
	for {
		select {
		case entry, ok := <-watcher.Updates():
			if !ok {
				return fmt.Errorf("scan task records: watcher closed: %w", cmp.Or(ctx.Err(), errWatchClosed))
			}
			if entry == nil {
				if err := CatchUp(ctx, s.kv, keys, seen, visit); err != nil {
					return fmt.Errorf("scan task records: %w", err)
				}
				return nil
			}
			if err := visit(entry); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("scan task records: %w", ctx.Err())
		}
	}
}
