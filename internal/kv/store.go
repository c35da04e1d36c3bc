package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultRetention is how long SUCCEEDED and CANCELLED records are kept.
const DefaultRetention = 24 * time.Hour

// StoreConfig configures a [Store].
type StoreConfig struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// Retention of SUCCEEDED and CANCELLED records, at least 1s; they expire
	// through a per-message TTL. Default 24h; -1 keeps them forever. DEAD
	// records are kept until replayed or deleted, like their dead letters.
	// It must be at least the de-duplication window of the priority streams
	// (default 2m): [NewStore] refuses a shorter one ([CheckRetention]).
	Retention time.Duration
	// TrailStream also publishes every move to AX_TRAIL (ax.trail.<id>),
	// without waiting for the ack. Default false: the record's own trail is
	// the trail of record.
	TrailStream bool
	// Test holds test knobs; zero in production.
	Test StoreTestConfig
}

// StoreTestConfig holds a [Store]'s test knobs.
type StoreTestConfig struct {
	// Reads, if set, observes the store's batched record reads.
	Reads *ReadTestHooks
}

func (c *StoreConfig) withDefaults() *StoreConfig {
	if c == nil {
		c = &StoreConfig{}
	}
	out := *c
	out.Retention = cmp.Or(out.Retention, DefaultRetention)
	return &out
}

func (c *StoreConfig) validate() error {
	if c.Retention != -1 && c.Retention < time.Second {
		return fmt.Errorf("kv store config: Retention %s must be at least 1s, or -1", c.Retention)
	}
	return nil
}

// Store reads and moves task records. It is safe for concurrent use.
type Store struct {
	js        jetstream.JetStream
	kv        jetstream.KeyValue
	cfg       *StoreConfig
	keyPrefix string // "$KV.AX_TASKS."
	reads     *batchReader
	// retentionTTL is the Nats-TTL header value of a terminal record:
	// Retention, formatted once.
	retentionTTL []string
	// buckets holds the priority streams' handles once bound
	// ([Store.Unclaimed]).
	buckets [streams.Priorities]atomic.Pointer[jetstream.Stream]
}

// NewStore binds to the task bucket, which [Provision] creates.
func NewStore(ctx context.Context, js jetstream.JetStream, cfg *StoreConfig) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := CheckRetention(ctx, js, cfg.Names, cfg.Retention); err != nil {
		return nil, err
	}
	bucket := cfg.Names.TasksBucket()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bind task bucket %s: %w", bucket, err)
	}
	return &Store{js: js, kv: kv, cfg: cfg, keyPrefix: KeyPrefix(bucket),
		reads: newBatchReader(js, kv, bucket, cfg.Test.Reads), retentionTTL: []string{cfg.Retention.String()}}, nil
}

// Get returns the record of a task and its revision, or [ErrNotFound], or
// a [*ForeignError] when the key holds a value ax did not write there.
func (s *Store) Get(ctx context.Context, ref Ref) (*Record, uint64, error) {
	if err := ref.Validate(); err != nil {
		return nil, 0, fmt.Errorf("get task %s: %w", ref, err)
	}
	data, rev, err := s.reads.get(ctx, ref.Key())
	if err != nil {
		return nil, 0, fmt.Errorf("get task %s: %w", ref, err)
	}
	var rec Record
	if err := decodeRecord(data, &rec); err != nil {
		return nil, 0, newForeignError(ref, rev, data, fmt.Errorf("decode: %w", err))
	}
	if rec.Ref() != ref {
		return nil, 0, newForeignError(ref, rev, data, fmt.Errorf("the value names task %s", rec.Ref()))
	}
	return &rec, rev, nil
}

// CheckBatchedReads makes sure the store can batch its record reads (one
// direct get of many keys: the permission to publish
// $JS.API.DIRECT.GET.<stream> itself, which docs/ax-permissions.conf grants
// workers): a server that cannot batch makes every read go alone, and a
// request the server does not answer (refused, or timed out) is an error.
func (s *Store) CheckBatchedReads(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	if err := s.reads.probe(ctx); err != nil {
		return fmt.Errorf("batched record read of %s: %w", s.cfg.Names.TasksBucket(), err)
	}
	return nil
}

// Find returns the tasks of every tenant that have a record for id, sorted
// by tenant: a verb given only an id acts on the one task, and asks for
// the tenant when there are several. It reads the bucket's subjects once.
func (s *Store) Find(ctx context.Context, id string) ([]Ref, error) {
	if err := streams.ValidateTaskID(id); err != nil {
		return nil, fmt.Errorf("find task %s: %w", id, err)
	}
	keys, err := ListKeys(ctx, s.js, s.cfg.Names.TasksBucket(), "*."+id)
	if err != nil {
		return nil, fmt.Errorf("find task %s: %w", id, err)
	}
	var out []Ref
	for _, key := range keys {
		ref, err := ParseKey(key)
		if err != nil {
			continue
		}
		// A listed key may be a delete marker: keep only live records.
		if _, err := s.kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("find task %s: %w", id, err)
		}
		out = append(out, ref)
	}
	slices.SortFunc(out, func(a, b Ref) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}

// Create writes a new record in its birth state rec.State, or returns
// [ErrExists] when the task already has one.
func (s *Store) Create(ctx context.Context, rec *Record, actor Actor) (*Record, uint64, error) {
	next, data, err := s.birth(rec, actor)
	if err != nil {
		return nil, 0, err
	}
	// A compare-and-set on "no message yet", as [Store.Apply] writes (one
	// request, its acknowledgement scanned without encoding/json). When the
	// key has a message, nats.go's Create decides: the record exists, or a
	// delete marker its expiry left is written over.
	key := rec.Ref().Key()
	rev, err := s.compareAndSet(ctx, key, data, 0, 0)
	if IsRevisionMismatch(err) {
		rev, err = s.kv.Create(ctx, key, data)
	}
	if IsRevisionMismatch(err) {
		return nil, 0, fmt.Errorf("create task %s: %w", rec.Ref(), ErrExists)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("create task %s: %w", rec.Ref(), err)
	}
	s.mirror(next)
	return next, rev, nil
}

// CreateMsg returns the message that creates rec when published (with
// JetStream, waiting for its ack, e.g. pipelined with a [Publisher]); a
// publish error that [IsRevisionMismatch] means the record already exists.
func (s *Store) CreateMsg(rec *Record, actor Actor) (*nats.Msg, error) {
	_, data, err := s.birth(rec, actor)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(s.keyPrefix + rec.Ref().Key())
	msg.Data = data
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	return msg, nil
}

func (s *Store) birth(rec *Record, actor Actor) (*Record, []byte, error) {
	if !CanBeBornAs(rec.State) {
		return nil, nil, fmt.Errorf("create task %s in %s: %w (a record is born PENDING, READY, RUNNING, CANCELLED, PAUSED or DEAD)", rec.Ref(), rec.State, ErrIllegalTransition)
	}
	if err := rec.Ref().Validate(); err != nil {
		return nil, nil, fmt.Errorf("create task: %w", err)
	}
	next := *rec
	next.Trail = nil
	now := time.Now().UTC()
	if next.CreatedAt.IsZero() {
		next.CreatedAt = now
	}
	if rec.State == StateRunning && next.CreatedAt.Before(now) {
		// Born RUNNING on a worker's first sight of a raw publish: the task
		// was READY in its bucket since it was published (CreatedAt).
		ready := Actor{Action: "publish"}
		if actor.Released != "" {
			ready = Actor{Action: ActionRelease, Note: actor.Released}
		}
		next.record("", StateReady, ready, next.CreatedAt)
		next.record(StateReady, StateRunning, actor, now)
	} else if rec.State == StateReady && next.CreatedAt.Before(now) {
		// Born READY for a message no worker claimed yet (aging): it was
		// READY since it was published (CreatedAt).
		next.record("", StateReady, actor, next.CreatedAt)
	} else {
		next.record("", rec.State, actor, now)
	}
	return &next, encodeRecord(&next), nil
}

// Transition moves task ref from state from to state to in one compare-and-set
// write, after mutate (which may be nil) changed the other fields. It returns
// [ErrWrongState] if the record is not in from, [ErrIllegalTransition] if the
// table forbids the move, and [ErrConflict] if another writer won the race.
func (s *Store) Transition(ctx context.Context, ref Ref, from, to State, actor Actor, mutate func(*Record) error) (*Record, uint64, error) {
	if !CanTransition(from, to) {
		return nil, 0, fmt.Errorf("move task %s %s -> %s: %w", ref, from, to, ErrIllegalTransition)
	}
	rec, rev, err := s.Get(ctx, ref)
	if err != nil {
		return nil, 0, err
	}
	if rec.State != from {
		return rec, rev, fmt.Errorf("move task %s %s -> %s: it is %s: %w", ref, from, to, rec.State, ErrWrongState)
	}
	return s.Apply(ctx, rec, rev, to, actor, mutate)
}

// Apply moves rec, read at revision rev, to state to in one compare-and-set
// write. rec is not modified; the new record and revision are returned. On
// [ErrConflict] the caller must re-read before deciding anything.
func (s *Store) Apply(ctx context.Context, rec *Record, rev uint64, to State, actor Actor, mutate func(*Record) error) (*Record, uint64, error) {
	from := rec.State
	if !CanTransition(from, to) {
		return nil, 0, fmt.Errorf("move task %s %s -> %s: %w", rec.Ref(), from, to, ErrIllegalTransition)
	}
	if err := rec.Ref().Validate(); err != nil {
		return nil, 0, fmt.Errorf("move task %s %s -> %s: %w", rec.Ref(), from, to, err)
	}
	next := *rec
	next.Trail = append(make([]Move, 0, len(rec.Trail)+1), rec.Trail...) // room for this move
	if mutate != nil {
		if err := mutate(&next); err != nil {
			return nil, 0, fmt.Errorf("move task %s %s -> %s: %w", rec.Ref(), from, to, err)
		}
		if next.Ref() != rec.Ref() {
			return nil, 0, fmt.Errorf("move task %s %s -> %s: a move may not change the task's tenant or id (to %s)", rec.Ref(), from, to, next.Ref())
		}
	}
	next.record(from, to, actor, time.Now().UTC())
	buf := getEncodeBuffer(&next)
	defer putEncodeBuffer(buf)
	*buf = next.appendJSON(*buf)
	var ttl time.Duration
	if s.expires(to) {
		ttl = s.cfg.Retention
	}
	newRev, err := s.compareAndSet(ctx, rec.Ref().Key(), *buf, rev, ttl)
	if IsRevisionMismatch(err) {
		return nil, 0, fmt.Errorf("move task %s %s -> %s at revision %d: %w", rec.Ref(), from, to, rev, ErrConflict)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("move task %s %s -> %s: %w", rec.Ref(), from, to, err)
	}
	s.mirror(&next)
	return &next, newRev, nil
}

// Delete removes task ref's record if it is still at revision rev: the
// task is unseen again. It returns [ErrConflict] if another writer moved it.
func (s *Store) Delete(ctx context.Context, ref Ref, rev uint64) error {
	if err := ref.Validate(); err != nil {
		return fmt.Errorf("delete task %s: %w", ref, err)
	}
	err := s.kv.Delete(ctx, ref.Key(), jetstream.LastRevision(rev))
	if IsRevisionMismatch(err) {
		return fmt.Errorf("delete task %s at revision %d: %w", ref, rev, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete task %s: %w", ref, err)
	}
	return nil
}

func (s *Store) expires(to State) bool {
	return s.cfg.Retention > 0 && (to == StateSucceeded || to == StateCancelled)
}

// compareAndSet writes data to key if its last revision is rev, with a
// per-message TTL when ttl > 0. The write is a publish sent as a request
// (nats.go's shared reply subscription) and awaited by its caller: the
// writes of concurrent callers go out together (one flush carries all that
// are ready, and the server stores them in one pass) instead of one round
// trip each, and each still learns its own outcome; a lost compare-and-set
// fails its own write only. data is not kept after the publish (nats.go
// copies it into its write buffer), so the caller may reuse it once
// compareAndSet returns. Its acknowledgement is read by hand
// ([parsePubAck]), not by encoding/json as nats.go's asynchronous publish
// reads it.
func (s *Store) compareAndSet(ctx context.Context, key string, data []byte, rev uint64, ttl time.Duration) (uint64, error) {
	msg := &nats.Msg{Subject: s.keyPrefix + key, Data: data, Header: make(nats.Header, 2)}
	msg.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(rev, 10)}
	if ttl > 0 {
		value := s.retentionTTL // read only: the header is only encoded
		if ttl != s.cfg.Retention {
			value = []string{ttl.String()}
		}
		msg.Header[jetstream.MsgTTLHeader] = value
	}
	reply, err := s.js.Conn().RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, jetstream.ErrNoStreamResponse // as nats.go's publish says it
	}
	if err != nil {
		return 0, err
	}
	return parsePubAck(reply.Data)
}

// updateWithTTL is a compare-and-set write of key in bucket with a
// per-message TTL, which KV Update cannot set: a publish to the key's
// subject with Nats-TTL and the expected last subject sequence rev. Task
// records use it for their retention and leases for their expiry.
func updateWithTTL(ctx context.Context, js jetstream.JetStream, bucket, key string, data []byte, ttl time.Duration, rev uint64) (uint64, error) {
	ack, err := js.Publish(ctx, KeySubject(bucket, key), data,
		jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func (s *Store) mirror(rec *Record) {
	if !s.cfg.TrailStream {
		return
	}
	data, err := json.Marshal(rec.LastMove())
	if err != nil {
		return
	}
	// Best effort by design: the record's own trail is authoritative.
	_, _ = s.js.PublishAsync(s.cfg.Names.TrailSubject(rec.Tenant, rec.ID), data)
}

// Trail returns the moves of a task, oldest first.
func (s *Store) Trail(ctx context.Context, ref Ref) ([]Move, error) {
	rec, _, err := s.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	return rec.Trail, nil
}

// Bucket returns the underlying KV bucket, for scans and watches.
func (s *Store) Bucket() jetstream.KeyValue { return s.kv }
