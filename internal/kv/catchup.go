package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// CatchUp completes what a watcher delivered before its initial-values mark
// (the nil entry): for each key of listed, the keys [ListKeys] returned
// before the watch began, that seen does not hold, it calls apply with the
// key's current entry; a key deleted since it was listed is skipped.
//
// nats.go's watcher (v1.55.0) sends its mark before a key that is updated
// while it delivers the current values (the key's version at the start is
// gone, the new one comes after the mark): a scan missed the one record
// being updated 1 time in 5, and a joining worker could miss a member
// renewing its lease. The watcher still delivers the newer version later,
// so apply may see a key again, or an older version after a newer one.
func CatchUp(ctx context.Context, bucket jetstream.KeyValue, listed []string, seen map[string]bool, apply func(jetstream.KeyValueEntry) error) error {
	for _, key := range listed {
		if seen[key] {
			continue
		}
		entry, err := bucket.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("catch up %s: %w", key, err)
		}
		if err := apply(entry); err != nil {
			return err
		}
	}
	return nil
}
