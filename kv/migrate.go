package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// MigrateReport says what [MigrateKeys] did.
type MigrateReport struct {
	// Moved counts the records moved under their tenant's key.
	Moved int
	// Skipped maps a legacy key left in place to why (its record does not
	// decode, or does not name a task of a valid tenant).
	Skipped map[string]string
}

// MigrateKeys moves every task record stored under the key of ax before v3
// (the task id alone) to its tenant's key ([Ref.Key]): the record is
// created there, then the old key is deleted at the revision read. Before
// each record moves, its delayed schedule moves under its tenant too
// ([streams.MoveSchedules]). It
// is idempotent: a record already under its new key only has its old key
// deleted. Run it with the mesh stopped (no worker, leader or client of
// either version): a process writing the old key meanwhile loses its write.
func MigrateKeys(ctx context.Context, js jetstream.JetStream, names streams.Names) (*MigrateReport, error) {
	bucketName := names.TasksBucket()
	bucket, err := js.KeyValue(ctx, bucketName)
	if err != nil {
		return nil, fmt.Errorf("migrate task records: bind %s: %w", bucketName, err)
	}
	keys, err := ListKeys(ctx, js, bucketName, "*") // one token: the old form
	if err != nil {
		return nil, fmt.Errorf("migrate task records: %w", err)
	}
	report := &MigrateReport{}
	skip := func(key, why string) {
		if report.Skipped == nil {
			report.Skipped = map[string]string{}
		}
		report.Skipped[key] = why
	}
	for _, key := range keys {
		if strings.Contains(key, ".") {
			continue
		}
		entry, err := bucket.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // a delete marker
		}
		if err != nil {
			return report, fmt.Errorf("migrate task record %s: %w", key, err)
		}
		var rec Record
		if err := decodeRecord(entry.Value(), &rec); err != nil {
			skip(key, "does not decode: "+err.Error())
			continue
		}
		ref := rec.Ref()
		if err := ref.Validate(); err != nil || rec.ID != key {
			skip(key, fmt.Sprintf("names task %q of tenant %q, not a task of its key", rec.ID, rec.Tenant))
			continue
		}
		if err := streams.MoveSchedules(ctx, js, names, ref.Tenant, ref.ID); err != nil {
			return report, fmt.Errorf("migrate task %s: %w", ref, err)
		}
		if err := copyRecord(ctx, js, bucketName, key, ref.Key()); err != nil && !IsRevisionMismatch(err) {
			return report, fmt.Errorf("migrate task %s: write %s: %w", ref, ref.Key(), err)
		}
		if err := bucket.Delete(ctx, key, jetstream.LastRevision(entry.Revision())); err != nil {
			return report, fmt.Errorf("migrate task %s: delete the old key %s: %w", ref, key, err)
		}
		report.Moved++
	}
	return report, nil
}

// copyRecord creates key to with the value of key from, keeping what is
// left of its per-message TTL (a finished record's retention).
func copyRecord(ctx context.Context, js jetstream.JetStream, bucket, from, to string) error {
	stream, err := js.Stream(ctx, StreamName(bucket))
	if err != nil {
		return err
	}
	prefix := KeyPrefix(bucket)
	raw, err := stream.GetLastMsgForSubject(ctx, prefix+from)
	if err != nil {
		return err
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(0)}
	if v := raw.Header.Get(jetstream.MsgTTLHeader); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil {
			secs, serr := strconv.ParseInt(v, 10, 64)
			if serr != nil {
				return fmt.Errorf("record %s: %s %q: %w", from, jetstream.MsgTTLHeader, v, err)
			}
			ttl = time.Duration(secs) * time.Second
		}
		left := ttl - time.Since(raw.Time)
		if left <= 0 {
			return nil // expired meanwhile: nothing to keep
		}
		opts = append(opts, jetstream.WithMsgTTL(max(left, time.Second)))
	}
	_, err = js.Publish(ctx, prefix+to, raw.Data, opts...)
	return err
}
