package ax

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/stderrlog"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/internal/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// asyncAckTimeout bounds the wait for one pipelined publish's ack.
const asyncAckTimeout = 10 * time.Second

// maxMoveTries bounds the re-reads of an action that loses a compare-and-set.
const maxMoveTries = 8

// Defaults of [Config].
const (
	DefaultMaxPending     = 4_000
	DefaultPublishRetries = 5
)

// Config configures a [Client].
type Config struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names Names
	// TracerProvider, when set, gives each submit a span ("ax.submit
	// <type>", a producer span with the task's id, type, tenant and
	// priority). Whether or not it is set, the trace context of the
	// submit's ctx travels with the task (W3C traceparent and tracestate
	// headers) to the handler. Default nil: no spans.
	TracerProvider trace.TracerProvider
	// Logger. Default: warnings and errors as JSON lines on standard
	// error (zap's production encoding at warn level), so that a server
	// outage is not silent; zap.NewNop() silences it.
	Logger *zap.Logger
	// MaxPending bounds the unacknowledged pipelined publishes of
	// SubmitBatch (messages and records), of all calls together.
	// Default 4,000.
	MaxPending int
	// PublishRetries is how often a publish that timed out or found no
	// responder is retried, with the same Nats-Msg-Id. Default 5.
	PublishRetries int
	// Store configures the task record store (retention, trail stream).
	Store StoreConfig
	// MaxTimeout bounds a task's Timeout; a task asking for more is refused
	// (ErrInvalidTask). Default 24h ([streams.DefaultMaxTimeout]).
	MaxTimeout time.Duration
	// MaxDelay bounds how far ahead a task's run time may be; a task asking
	// for more is refused. Default 366 days ([streams.DefaultMaxDelay]).
	MaxDelay time.Duration
	// Early is how long before its run time a delayed task's server-side
	// schedule fires (the leader releases it at the exact time). Default 1s.
	Early time.Duration
	// PublishOnly makes a client that needs only a producer's permissions
	// (docs/ax-permissions.conf: publish on ax.submit.> or its tenant's
	// submit subjects, its own inbox, and subscribe to ax.events.pressure).
	// [NewClient] then reads nothing from the server; Submit and
	// SubmitBatch publish each task and write no record (the worker that
	// first sees the task writes it, docs/WIRE.md), a delayed task is
	// published with its Ax-Run-At for a worker to defer, a duplicate is
	// reported only for a retried publish the bucket de-duplicates (each
	// Submit's Nats-Msg-Id carries a token of its own, docs/WIRE.md; a
	// second message of an id a worker drops), and backpressure is followed from the
	// reports the leader publishes while a bucket is at the alert level.
	// Store is nil, and CancelDelayed and the cron methods return
	// [ErrPublishOnly].
	PublishOnly bool
	// UniqueGrace is how long a unique claim whose task was not yet
	// published, and has no record, holds its key ([UniqueOpts]): its
	// submitter may still be publishing. Past it, the submitter is taken
	// for dead and another submit may take the key over; a unique submit
	// therefore publishes within half of it. At least 1s. Default 1m.
	UniqueGrace time.Duration
	// SubmitHooks run around the submit of every task, in order
	// ([SubmitHook]); a tracer injects its trace context with one.
	// Default none.
	SubmitHooks []SubmitHook
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.Logger == nil {
		out.Logger = stderrlog.New()
	}
	out.MaxPending = cmp.Or(out.MaxPending, DefaultMaxPending)
	out.PublishRetries = cmp.Or(out.PublishRetries, DefaultPublishRetries)
	out.Early = cmp.Or(out.Early, DefaultEarly)
	out.MaxTimeout = cmp.Or(out.MaxTimeout, streams.DefaultMaxTimeout)
	out.MaxDelay = cmp.Or(out.MaxDelay, streams.DefaultMaxDelay)
	out.UniqueGrace = cmp.Or(out.UniqueGrace, DefaultUniqueGrace)
	out.Store.Names = out.Names
	return &out
}

func (c *Config) validate() error {
	if c.MaxPending < 1 {
		return fmt.Errorf("client config: MaxPending %d must be positive", c.MaxPending)
	}
	if c.PublishRetries < 0 {
		return fmt.Errorf("client config: PublishRetries %d must not be negative", c.PublishRetries)
	}
	if c.UniqueGrace < time.Second {
		return fmt.Errorf("client config: UniqueGrace %s must be at least 1s", c.UniqueGrace)
	}
	return nil
}

// Client submits tasks. It is safe for concurrent use.
type Client struct {
	cfg      *Config
	js       jetstream.JetStream // own handle: its async publish window (the trail stream's) is ours
	pub      *kv.Publisher       // SubmitBatch's pipelined publishes: messages and records
	store    *kv.Store
	claims   *kv.Claims
	pressure atomic.Pointer[Pressure] // last backpressure report seen
	// sent counts, per priority, the tasks this client stored since that
	// report: admission adds them to the report's depth, so a burst is
	// refused near the threshold rather than a report interval later.
	sent   [streams.Priorities]atomic.Int64
	watch  pressureWatch
	tracer trace.Tracer // nil: no spans
}

// NewClient returns a client on the connection of js. The streams and
// buckets must be provisioned ([streams.Provision], [kv.Provision]),
// unless [Config.PublishOnly] is set. A permission the connection's user
// lacks fails it at once with an error naming the subject (it matches
// [nats.ErrPermissionViolation]).
func NewClient(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// A pipelined publish whose ack never comes (a reply dropped under
	// load) times out and is retried with its id, instead of blocking
	// forever.
	own, err := jetstream.New(js.Conn(), jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(asyncAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	pub, err := kv.NewPublisher(js.Conn(), &kv.PublisherConfig{MaxPending: cfg.MaxPending, Timeout: asyncAckTimeout})
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	guard, ctx := denied.Watch(ctx, js.Conn())
	defer guard.Stop()
	c := &Client{cfg: cfg, js: own, pub: pub, claims: kv.NewClaims(own, cfg.Names), tracer: tracing.Tracer(cfg.TracerProvider)}
	if err := c.open(ctx, guard); err != nil {
		var d *denied.Error
		if !cfg.PublishOnly && errors.As(err, &d) {
			d.Hint = "a producer allowed only to submit sets Config.PublishOnly (ax submit --publish-only)"
		}
		if c.watch.sub != nil {
			_ = c.watch.sub.Unsubscribe()
		}
		return nil, fmt.Errorf("new client: %w", err)
	}
	return c, nil
}

// open binds the record store (unless publish-only) and follows the
// pressure reports, failing on a violation guard saw.
func (c *Client) open(ctx context.Context, guard *denied.Guard) error {
	if !c.cfg.PublishOnly {
		store, err := kv.NewStore(ctx, c.js, &c.cfg.Store)
		if err != nil {
			return guard.Err(err)
		}
		c.store = store
	}
	if err := c.watchPressure(ctx); err != nil {
		return guard.Err(err)
	}
	return guard.Check(ctx)
}

// Store returns the client's task record store (nil with
// [Config.PublishOnly]), for tools and tests that own a deployment: its
// writes move the state machine, which the shipped service and producer
// users may not do (docs/ax-permissions.conf). A service reads a task with
// [Client.Get].
func (c *Client) Store() *Store { return c.store }

// ErrPublishOnly is returned by the methods a client made with
// [Config.PublishOnly] may not use: they read or write records.
var ErrPublishOnly = errors.New("not available to a publish-only client (Config.PublishOnly)")

// Submit validates task, publishes it to its priority bucket and, for a
// task with an id, key, delay or unique key of its own, writes its READY
// record; the record of a task whose id and key Submit made is written by
// the worker that claims it, and [Client.Get] finds the task in its bucket
// until then (docs/decisions/record-at-claim.md). On [ErrOverloaded]
// nothing was stored; on another error the
// task may or may not be stored, and retrying with the returned id is safe.
// A task with [TaskSpec.Unique] first claims its unique key in AX_UNIQUE;
// when another task holds it, nothing is published and the returned info
// is that task's ([TaskInfo.UniqueSkipped]).
func (c *Client) Submit(ctx context.Context, task TaskSpec) (TaskInfo, error) {
	now := time.Now()
	t, err := task.normalize(now)
	if err == nil {
		err = c.bounds(t, now)
	}
	if err == nil {
		err = c.admit(t, now)
	}
	if err != nil {
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, err
	}
	ctx, span := c.traceSubmit(ctx, &t)
	after, err := c.beforeSubmit(ctx, &t)
	if err != nil {
		endSpan(span, err)
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, err
	}
	var info TaskInfo
	if t.Unique != nil {
		info, err = c.submitUnique(ctx, t)
	} else {
		info, err = c.submit(ctx, t)
	}
	after(info, err)
	endSpan(span, err)
	return info, err
}

// submit stores a normalized task: its message and record, or its
// schedule and record if delayed.
func (c *Client) submit(ctx context.Context, t TaskSpec) (TaskInfo, error) {
	if !t.RunAt.IsZero() && !c.cfg.PublishOnly {
		return c.submitDelayed(ctx, t)
	}
	recorded := !c.cfg.PublishOnly && !t.claimRecords
	msg := t.message(c.cfg.Names, recorded)
	var err error
	var ack *jetstream.PubAck
	for attempt := 0; ; attempt++ {
		ack, err = c.js.PublishMsg(ctx, msg)
		if err == nil || !retryable(err) || attempt >= c.cfg.PublishRetries || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, c.submitError(t, err)
	}
	dup, seq := ack.Duplicate, ack.Sequence
	if !dup {
		// Counted at the ack, before the record's write: a pressure report
		// sampled after the store resets the count (setPressure), and one
		// that arrived during the write, counted after it, would count the
		// task twice and refuse a submit below the threshold.
		c.sent[level(t.Priority)].Add(1)
	}
	if !recorded { // the worker that first sees the task writes its record
		return t.info(c.cfg.Names, seq, dup), nil
	}
	_, _, err = c.store.Create(ctx, t.record(ack.Stream, ack.Sequence), kv.Actor{Action: "submit"})
	if errors.Is(err, kv.ErrExists) {
		var rec *kv.Record
		rec, err = c.existing(ctx, t, ack)
		if rec != nil {
			dup, seq = true, duplicateSeq(rec, ack)
		}
	}
	if err != nil {
		return TaskInfo{ID: t.ID, Tenant: t.Tenant}, fmt.Errorf("submit task %s: stored, but its record was not written: %w (%w)", t.ID, err, ErrMaybeStored)
	}
	return t.info(c.cfg.Names, seq, dup), nil
}

// SubmitBatch submits many tasks with pipelined publishes, messages and
// then records (at most [Config.MaxPending] in flight), and retries
// timeouts with the same ids, so no task is lost or doubled. The returned
// infos line up with tasks and carry every id; on partial failure the
// error is a [*BatchError] naming the tasks that were not accepted
// (retrying exactly those, with their ids, is safe). With [Atomic] the
// batch is all or nothing instead ([Client.submitAtomic]).
func (c *Client) SubmitBatch(ctx context.Context, tasks []TaskSpec, opts ...BatchOption) ([]TaskInfo, error) {
	var o batchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.atomic {
		return c.submitAtomic(ctx, tasks)
	}
	if o.notes != nil && len(o.notes) != len(tasks) {
		return nil, fmt.Errorf("submit batch: %d notes for %d tasks", len(o.notes), len(tasks))
	}
	now := time.Now()
	infos := make([]TaskInfo, len(tasks))
	failed := map[int]error{}
	normalized := make([]TaskSpec, len(tasks))
	msgs := make([]*nats.Msg, len(tasks))
	afters := make([]func(TaskInfo, error), len(tasks))
	spans := map[int]trace.Span{} // with a tracer provider: each task's submit span
	defer func() {
		for i, after := range afters {
			if after != nil {
				after(infos[i], failed[i])
			}
		}
		for i, span := range spans {
			endSpan(span, failed[i])
		}
	}()
	for i, task := range tasks {
		t, err := task.normalize(now)
		if err == nil {
			err = c.bounds(t, now)
		}
		if err == nil {
			err = c.admit(t, now)
		}
		if err == nil {
			if _, span := c.traceSubmit(ctx, &t); span != nil {
				spans[i] = span
			}
			afters[i], err = c.beforeSubmit(ctx, &t) // nil on error: it was called
		}
		infos[i].ID, infos[i].Tenant = t.ID, t.Tenant
		if err != nil {
			failed[i] = err
			continue
		}
		if t.Unique != nil { // one claim each
			if infos[i], err = c.submitUnique(ctx, t); err != nil {
				failed[i] = err
			}
			continue
		}
		if !t.RunAt.IsZero() && !c.cfg.PublishOnly { // delayed: one schedule each
			if infos[i], err = c.submitDelayed(ctx, t); err != nil {
				failed[i] = err
			}
			continue
		}
		normalized[i] = t
		msgs[i] = t.message(c.cfg.Names, !c.cfg.PublishOnly && o.notes == nil && !t.claimRecords)
		if o.notes != nil {
			msgs[i].Header.Set(streams.HeaderRelease, kv.CutError(o.notes[i]))
		}
	}
	c.storeBatch(ctx, normalized, msgs, infos, failed, !c.cfg.PublishOnly && o.notes == nil)
	if len(failed) > 0 {
		return infos, &BatchError{Failed: failed}
	}
	return infos, nil
}

// storeBatch publishes msgs[i], the message of tasks[i], for every i whose
// message is not nil, pipelined, and retries the retryable failures with
// the same ids; then, when record is set, it writes the records of the
// stored tasks, pipelined, and sets infos[i] or failed[i].
func (c *Client) storeBatch(ctx context.Context, tasks []TaskSpec, msgs []*nats.Msg, infos []TaskInfo, failed map[int]error, record bool) {
	pending := make([]int, 0, len(msgs))
	for i, msg := range msgs {
		if msg != nil {
			pending = append(pending, i)
		}
	}
	acks := make([]*jetstream.PubAck, len(msgs))
	for attempt := 0; len(pending) > 0; attempt++ {
		batch := make([]*nats.Msg, len(pending))
		for k, i := range pending {
			batch[k] = msgs[i]
		}
		results := c.pub.PublishAll(ctx, batch)
		var again []int
		for k, i := range pending {
			switch err := results[k].Err; {
			case err == nil:
				acks[i] = &results[k].Ack
			case ctx.Err() != nil && errors.Is(err, ctx.Err()):
				failed[i] = fmt.Errorf("submit task %s: %w", tasks[i].ID, err)
			case retryable(err) && attempt < c.cfg.PublishRetries && ctx.Err() == nil:
				again = append(again, i)
			default:
				failed[i] = c.submitError(tasks[i], err)
			}
		}
		pending = again
	}
	existed := map[int]bool{}
	if record { // else the workers write the records
		existed = c.writeRecords(ctx, tasks, acks, failed)
	}
	for i, ack := range acks {
		if ack == nil || failed[i] != nil {
			continue
		}
		dup, seq := ack.Duplicate, ack.Sequence
		if existed[i] {
			other, err := c.existing(ctx, tasks[i], ack)
			if err != nil {
				failed[i] = fmt.Errorf("submit task %s: stored, but its record was not read: %w", tasks[i].ID, err)
				continue
			}
			if other != nil {
				dup, seq = true, duplicateSeq(other, ack)
			}
		}
		infos[i] = tasks[i].info(c.cfg.Names, seq, dup)
		if !dup {
			c.sent[level(tasks[i].Priority)].Add(1)
		}
	}
}

// writeRecords creates the READY records of the accepted tasks, pipelined,
// and returns the tasks whose record existed already (see [Client.existing]).
func (c *Client) writeRecords(ctx context.Context, tasks []TaskSpec, acks []*jetstream.PubAck, failed map[int]error) map[int]bool {
	existed := map[int]bool{}
	indexes := make([]int, 0, len(acks))
	msgs := make([]*nats.Msg, 0, len(acks))
	for i, ack := range acks {
		if ack == nil || tasks[i].claimRecords {
			continue
		}
		msg, err := c.store.CreateMsg(tasks[i].record(ack.Stream, ack.Sequence), kv.Actor{Action: "submit"})
		if err != nil {
			failed[i] = fmt.Errorf("submit task %s: stored, but its record was not written: %w", tasks[i].ID, err)
			continue
		}
		indexes = append(indexes, i)
		msgs = append(msgs, msg)
	}
	for k, res := range c.pub.PublishAll(ctx, msgs) {
		i := indexes[k]
		switch {
		case res.Err == nil:
		case kv.IsRevisionMismatch(res.Err):
			existed[i] = true
		case ctx.Err() != nil && errors.Is(res.Err, ctx.Err()):
			failed[i] = fmt.Errorf("submit task %s: %w", tasks[i].ID, res.Err)
		default:
			failed[i] = fmt.Errorf("submit task %s: stored, but its record was not written: %w", tasks[i].ID, res.Err)
		}
	}
	return existed
}

// bounds refuses a task whose timeout or run time is above the client's
// bounds.
func (c *Client) bounds(t TaskSpec, now time.Time) error {
	if t.Timeout > c.cfg.MaxTimeout {
		return fmt.Errorf("%w: Timeout %s is above the limit %s (Config.MaxTimeout)", ErrInvalidTask, t.Timeout, c.cfg.MaxTimeout)
	}
	if !t.RunAt.IsZero() && t.RunAt.Sub(now) > c.cfg.MaxDelay {
		return fmt.Errorf("%w: run time %s is more than %s ahead (Config.MaxDelay)", ErrInvalidTask, t.RunAt.UTC().Format(time.RFC3339), c.cfg.MaxDelay)
	}
	return nil
}

// duplicateSeq is the sequence a duplicate submit reports: its task's
// message when that is in the bucket the submit went to (the message the
// submit stored was deleted), else the sequence of the submit's ack.
func duplicateSeq(rec *kv.Record, ack *jetstream.PubAck) uint64 {
	if rec.StreamSeq != 0 && rec.Stream == ack.Stream {
		return rec.StreamSeq
	}
	return ack.Sequence
}

// existing settles a submit whose record exists already, and returns the
// record when the id belonged to another message (a duplicate), nil when
// the message is the task's. Either a worker saw this
// message first (the record names it), or the task waits for its first
// message (an operator paused or cancelled the id before it was seen), or
// the id was submitted before: to another bucket, as a delayed task, or past
// the de-duplication window. Then this message is a second one for the same
// task; it is deleted, so that one id never has two messages (workers would
// drop it anyway: a record names the one message that runs its task).
func (c *Client) existing(ctx context.Context, t TaskSpec, ack *jetstream.PubAck) (*kv.Record, error) {
	for range maxMoveTries {
		rec, rev, err := c.store.Get(ctx, kv.Ref{Tenant: t.Tenant, ID: t.ID})
		if err != nil {
			return nil, err
		}
		if rec.Names(c.cfg.Names, ack.Stream, ack.Sequence) {
			return nil, nil // ours
		}
		if rec.StreamSeq == 0 && rec.State == kv.StateCancelled && rec.Type == "" {
			return nil, nil // cancelled before its first message: this one, which workers drop
		}
		if rec.StreamSeq == 0 && rec.State == kv.StatePaused && rec.Type == "" {
			// Paused before its first message: bind this one, as a worker
			// would, so that the resume runs it. On a lost race, look again:
			// a worker may have bound this very message, or another one.
			_, _, err := c.store.Apply(ctx, rec, rev, kv.StatePaused, kv.Actor{Action: "bind"}, func(r *kv.Record) error {
				r.Type, r.Tenant, r.Key, r.Priority = t.Type, t.Tenant, t.Key, level(t.Priority)
				r.Bind(1, ack.Stream, ack.Sequence)
				return nil
			})
			if errors.Is(err, kv.ErrConflict) {
				continue
			}
			return nil, err
		}
		if !ack.Duplicate { // a duplicate ack names the earlier message: never delete that
			if stream, err := c.js.Stream(ctx, ack.Stream); err == nil {
				_ = stream.DeleteMsg(ctx, ack.Sequence)
			}
		}
		return rec, nil
	}
	return nil, fmt.Errorf("submit task %s: its record kept changing: %w", t.ID, kv.ErrConflict)
}

// retryable reports whether a publish may be retried with the same id.
func retryable(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// submitError explains a failed publish of t: a full bucket, or a bucket
// that refuses non-core tasks (its stream no longer has the submit subject,
// so no stream answers) is [ErrOverloaded].
func (c *Client) submitError(t TaskSpec, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == streams.ErrCodeBucketFull {
		return fmt.Errorf("submit task %s: %w (%s)", t.ID, ErrOverloaded, apiErr.Description)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		if p := c.pressure.Load(); p != nil && !t.Core {
			for _, b := range p.Buckets {
				if b.Priority == level(t.Priority) && (b.Refusing || b.Level >= LevelRefuse) {
					return fmt.Errorf("submit task %s: %w: bucket %s refuses non-core tasks (%.0f%% full)", t.ID, ErrOverloaded, b.Stream, 100*b.Depth)
				}
			}
		}
		subject := c.cfg.Names.SubmitSubject(level(t.Priority), t.Tenant, t.Type, t.Key)
		if t.Core {
			subject = c.cfg.Names.CoreSubject(level(t.Priority), t.Tenant, t.Type, t.Key)
		}
		return fmt.Errorf("submit task %s: no stream stored %s (%w): the bucket refuses non-core tasks under backpressure, or JetStream or the bucket is not available", t.ID, subject, err)
	}
	if apiErr != nil { // the stream answered: not stored
		return fmt.Errorf("submit task %s: %w", t.ID, err)
	}
	// Sent, and no answer read: the stream may have stored it.
	return fmt.Errorf("submit task %s: published; its acknowledgement could not be read: %w (%w)", t.ID, err, ErrMaybeStored)
}
