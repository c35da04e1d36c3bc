package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Claim is the value of a unique-task claim in AX_UNIQUE (docs/WIRE.md,
// "Unique tasks"): the task that holds a unique key of its tenant for a
// period, the key's per-message TTL.
type Claim struct {
	// Tenant and ID name the task that holds the key; Tenant is the key's.
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	// Type, Priority (0..4) and Key (its partition key) of the task, for
	// the submit that finds it (the claim key is a hash).
	Type     string `json:"type,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Key      string `json:"key,omitempty"`
	// For is the unique period the claim was written with (its TTL).
	For Duration `json:"for,omitempty"`
	// Published is set once the task's message (or, for a delayed task, its
	// record and schedule) was stored: before, the claim holds only for
	// the grace of [Claims] readers, since its writer may have died before
	// publishing.
	Published bool `json:"published,omitempty"`
	// Stream and Seq name the task's message once published (zero for a
	// delayed task, whose record names its schedule).
	Stream string `json:"stream,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
}

// MarkPublished records that the claim's task was stored, as the message
// at seq of stream (zero for a delayed task, whose record names its
// schedule). Outside kv a write of a field named Stream reads as a write of
// a record's binding (TestOnlyBindWritesTheBinding): claims are marked here.
func (c *Claim) MarkPublished(stream string, seq uint64) {
	c.Published, c.Stream, c.Seq = true, stream, seq
}

// ErrClaimed means a unique key already has a live claim.
var ErrClaimed = errors.New("unique key already claimed")

// ErrBadClaim means a claim's value is not a claim ax writes (a raw
// writer's mistake, or a forgery): it is never read as a claim.
var ErrBadClaim = errors.New("unique claim is not readable")

// ClaimKey returns the key of a unique claim of tenant in AX_UNIQUE:
// "<tenant>.<hash>", the tenant written as in a task record key
// ([Ref.Key]), so that a tenant's permissions can be limited to its own
// claims ($KV.AX_UNIQUE.<tenant>.>). hash must be a KV key token.
func ClaimKey(tenant, hash string) string { return tenantKey(tenant) + "." + hash }

// Claims reads and writes unique-task claims with plain JetStream publishes
// and direct gets on the subjects of one key ($KV.AX_UNIQUE.<key> and
// $JS.API.DIRECT.GET.KV_AX_UNIQUE.$KV.AX_UNIQUE.<key>): it needs no
// stream info and no consumer, so that a producer whose permissions are
// limited to its tenant's keys can use it (docs/ax-permissions.conf). It is
// safe for concurrent use.
type Claims struct {
	js     jetstream.JetStream
	bucket string
}

// NewClaims returns the claims of the deployment names on js's connection.
// It does no I/O.
func NewClaims(js jetstream.JetStream, names streams.Names) *Claims {
	return &Claims{js: js, bucket: names.UniqueBucket()}
}

// Create writes claim under key with the TTL ttl (whole seconds, at least
// 1s), if the key has no live claim. It returns the claim's revision, or
// [ErrClaimed] with the live claim's revision, or [ErrBadClaim] with the
// revision of a value that is not a claim of the key's tenant.
func (c *Claims) Create(ctx context.Context, key string, claim *Claim, ttl time.Duration) (uint64, error) {
	rev, err := c.write(ctx, key, claim, ttl, 0)
	if !errors.Is(err, ErrConflict) {
		return rev, err
	}
	// The key has a message: a live claim, or the marker of one that
	// expired or was released, which a create may replace.
	_, last, err := c.Get(ctx, key)
	switch {
	case err == nil:
		return last, fmt.Errorf("claim %s/%s: %w", c.bucket, key, ErrClaimed)
	case errors.Is(err, ErrNotFound) && last > 0:
		return c.write(ctx, key, claim, ttl, last)

	case errors.Is(err, ErrNotFound): // gone in between: try again once
		return c.write(ctx, key, claim, ttl, 0)
	}
	return last, err
}

// Update replaces the claim under key, at revision rev, by claim with the
// TTL ttl. It returns [ErrConflict] when the key changed since rev.
func (c *Claims) Update(ctx context.Context, key string, claim *Claim, ttl time.Duration, rev uint64) (uint64, error) {
	return c.write(ctx, key, claim, ttl, rev)
}

func (c *Claims) write(ctx context.Context, key string, claim *Claim, ttl time.Duration, rev uint64) (uint64, error) {
	data, err := json.Marshal(claim)
	if err != nil {
		return 0, fmt.Errorf("claim %s/%s: %w", c.bucket, key, err)
	}
	ack, err := c.js.Publish(ctx, c.subject(key), data, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if IsRevisionMismatch(err) {
		return 0, fmt.Errorf("claim %s/%s at revision %d: %w", c.bucket, key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("claim %s/%s: %w", c.bucket, key, c.explain(err))
	}
	return ack.Sequence, nil
}

// Release removes the claim under key if it is still at revision rev: a
// delete marker that expires after a minute.
func (c *Claims) Release(ctx context.Context, key string, rev uint64) error {
	msg := nats.NewMsg(c.subject(key))
	msg.Header.Set("KV-Operation", "DEL")
	_, err := c.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(time.Minute))
	if IsRevisionMismatch(err) {
		return fmt.Errorf("release claim %s/%s at revision %d: %w", c.bucket, key, rev, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("release claim %s/%s: %w", c.bucket, key, c.explain(err))
	}
	return nil
}

// Get returns the live claim under key, its revision and when the server
// stored it. With no live claim it returns [ErrNotFound] and the revision
// of the key's delete marker, if any (0 when the key has no message). A
// value that is not a claim of the key's tenant is [ErrBadClaim].
func (c *Claims) Get(ctx context.Context, key string) (*Claim, uint64, error) {
	claim, rev, _, err := c.get(ctx, key)
	return claim, rev, err
}

// GetStored is [Claims.Get] that also returns when the server stored the
// claim.
func (c *Claims) GetStored(ctx context.Context, key string) (*Claim, uint64, time.Time, error) {
	return c.get(ctx, key)
}

func (c *Claims) get(ctx context.Context, key string) (*Claim, uint64, time.Time, error) {
	msg, err := directGetLast(ctx, c.js.Conn(), StreamName(c.bucket), c.subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, time.Time{}, fmt.Errorf("claim %s/%s: %w", c.bucket, key, ErrNotFound)
	}
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("read claim %s/%s: %w", c.bucket, key, c.explain(err))
	}
	if deleted(msg.Header) {
		return nil, msg.Sequence, msg.Time, fmt.Errorf("claim %s/%s: %w", c.bucket, key, ErrNotFound)
	}
	var claim Claim
	dec := json.NewDecoder(bytes.NewReader(msg.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&claim); err != nil {
		return nil, msg.Sequence, msg.Time, fmt.Errorf("claim %s/%s (revision %d): %w: %w", c.bucket, key, msg.Sequence, ErrBadClaim, err)
	}
	if tenant, _, _ := strings.Cut(key, "."); tenant != tenantKey(claim.Tenant) || streams.ValidateTaskID(claim.ID) != nil {
		return nil, msg.Sequence, msg.Time, fmt.Errorf("claim %s/%s (revision %d): %w: it names task %q of tenant %q, not a task of the key's tenant",
			c.bucket, key, msg.Sequence, ErrBadClaim, claim.ID, claim.Tenant)
	}
	return &claim, msg.Sequence, msg.Time, nil
}

func (c *Claims) subject(key string) string { return KeySubject(c.bucket, key) }

// explain names the bucket of a request no stream answered: a deployment
// provisioned before unique tasks.
func (c *Claims) explain(err error) error {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("no bucket %s answered (%w): run `ax provision` to create it", c.bucket, err)
	}
	return err
}

// GetRecord reads the record of task ref with one direct get on its key's
// subject ($JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS.<tenant>.<id>), the
// one read a producer limited to its tenant's records may make. It
// answers as [Store.Get] does.
func GetRecord(ctx context.Context, nc *nats.Conn, names streams.Names, ref Ref) (*Record, uint64, error) {
	if err := ref.Validate(); err != nil {
		return nil, 0, fmt.Errorf("get task %s: %w", ref, err)
	}
	bucket := names.TasksBucket()
	msg, err := directGetLast(ctx, nc, StreamName(bucket), KeySubject(bucket, ref.Key()))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, fmt.Errorf("get task %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get task %s: %w", ref, err)
	}
	if deleted(msg.Header) {
		return nil, 0, fmt.Errorf("get task %s: %w", ref, ErrNotFound)
	}
	var rec Record
	if err := decodeRecord(msg.Data, &rec); err != nil {
		return nil, 0, newForeignError(ref, msg.Sequence, msg.Data, fmt.Errorf("decode: %w", err))
	}
	if rec.Ref() != ref {
		return nil, 0, newForeignError(ref, msg.Sequence, msg.Data, fmt.Errorf("the value names task %s", rec.Ref()))
	}
	return &rec, msg.Sequence, nil
}

// deleteOp is the KV operation header of a delete or purge marker.
const deleteOp = "KV-Operation"

// deleted reports whether a KV message is a delete or purge marker: one
// written by a client (KV-Operation) or by the server when a key's TTL ran
// out (Nats-Marker-Reason).
func deleted(h nats.Header) bool {
	return h.Get(deleteOp) != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// directGetLast reads the last message of subject in stream with a direct
// get, which names the subject in its own subject, so that a permission
// can allow it subject by subject.
func directGetLast(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	if len(reply.Data) == 0 {
		switch reply.Header.Get("Status") {
		case "":
		case "404":
			return nil, jetstream.ErrMsgNotFound
		default:
			return nil, fmt.Errorf("direct get %s from %s: %s %s", subject, stream, reply.Header.Get("Status"), reply.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(reply.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get %s from %s: no sequence in the reply: %w", subject, stream, err)
	}
	at, _ := time.Parse(time.RFC3339Nano, reply.Header.Get(jetstream.TimeStampHeaer))
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: reply.Header, Data: reply.Data, Time: at}, nil
}
