package kv

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeySubject is the subject of key in the KV bucket named bucket
// ("$KV.<bucket>.<key>"): where its values are written and stored. Every
// subject of a bucket's key is formed here.
func KeySubject(bucket, key string) string { return KeyPrefix(bucket) + key }

// KeyPrefix is the subject prefix of every key of bucket ("$KV.<bucket>.").
func KeyPrefix(bucket string) string { return "$KV." + bucket + "." }

// StreamName is the name of the stream that holds the KV bucket named
// bucket ("KV_<bucket>").
func StreamName(bucket string) string { return "KV_" + bucket }

// ListKeys returns the keys of the KV bucket named bucket that match filter
// (a key with NATS wildcards; "" for every key), sorted. A deleted key may
// be listed (its delete marker is a message of its subject): a Get of it
// reports [jetstream.ErrKeyNotFound].
//
// It reads the bucket stream's subjects in one request (one per 100,000
// subjects), a snapshot taken under the stream's lock, and needs no
// consumer: an operator, who may only read, lists cron jobs with it.
// nats.go's KeyValue.ListKeys, a watcher that ends when it has caught up,
// can return no keys at all while a key is being updated (seen 1 list in
// 454 with one key updated in a loop), which would make a live worker look
// gone or a cron job look removed.
//
// A key deleted with KeyValue.Delete keeps its marker, and so its place in
// the list, for good; one expired by its TTL or deleted with [DeleteKey]
// (a released lease, a removed cron job) leaves with its marker.
func ListKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) ([]string, error) {
	stream, err := js.Stream(ctx, StreamName(bucket))
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", bucket, err)
	}
	prefix := KeyPrefix(bucket)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+cmp.Or(filter, ">")))
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subject, prefix))
	}
	slices.Sort(keys)
	return keys, nil
}

// DeleteKey deletes key from bucket if its revision is still rev, leaving a
// marker that expires with the bucket's LimitMarkerTTL (a purge with that
// TTL), so that the key leaves the bucket's subjects ([ListKeys]) as an
// expired key does; a plain delete's marker stays for good. Watchers see a
// purge. A bucket without marker TTLs gets a plain delete.
func DeleteKey(ctx context.Context, bucket jetstream.KeyValue, key string, rev uint64) error {
	status, err := bucket.Status(ctx)
	if err != nil {
		return err
	}
	return deleteKey(ctx, bucket, key, rev, status.LimitMarkerTTL())
}

// deleteKey is [DeleteKey] with the bucket's marker TTL known (0: none).
func deleteKey(ctx context.Context, bucket jetstream.KeyValue, key string, rev uint64, markerTTL time.Duration) error {
	if markerTTL > 0 {
		return bucket.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	}
	return bucket.Delete(ctx, key, jetstream.LastRevision(rev))
}
