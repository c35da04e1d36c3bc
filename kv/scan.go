package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
//
// The keys are listed first ([ListKeys]): nats.go's watcher marks the end
// of the current values before a record that is updated meanwhile (its
// version at the start is gone, its new one comes after the mark), which
// missed one key being updated in 5 scans of 201 keys. A listed key the
// watcher did not deliver by its mark is read directly.
func (s *Store) Scan(ctx context.Context, fn func(rec *Record, rev uint64) error, unreadable func(*UnreadableError)) error {
	keys, err := ListKeys(ctx, s.js, s.cfg.Names.TasksBucket(), "")
	if err != nil {
		return fmt.Errorf("scan task records: %w", err)
	}
	watcher, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("scan task records: %w", err)
	}
	defer func() { _ = StopWatch(watcher) }()
	seen := make(map[string]bool, len(keys))
	visit := func(entry jetstream.KeyValueEntry) error {
		seen[entry.Key()] = true
		var rec Record
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			unreadable(&UnreadableError{Key: entry.Key(), Revision: entry.Revision(), Err: err})
			return nil
		}
		return fn(&rec, entry.Revision())
	}
	for {
		select {
		case entry, ok := <-watcher.Updates():
			if !ok {
				return fmt.Errorf("scan task records: watcher closed: %w", cmp.Or(ctx.Err(), errors.New("by the server")))
			}
			if entry == nil {
				return s.visitUnseen(ctx, keys, seen, visit)
			}
			if err := visit(entry); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("scan task records: %w", ctx.Err())
		}
	}
}

// visitUnseen reads and visits each of keys not in seen; a key deleted
// since it was listed is skipped.
func (s *Store) visitUnseen(ctx context.Context, keys []string, seen map[string]bool, visit func(jetstream.KeyValueEntry) error) error {
	for _, key := range keys {
		if seen[key] {
			continue
		}
		entry, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("scan task records: get %s: %w", key, err)
		}
		if err := visit(entry); err != nil {
			return err
		}
	}
	return nil
}
