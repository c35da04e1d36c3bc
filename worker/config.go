package worker

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/stderrlog"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultConcurrency = 16
	DefaultTimeout     = 30 * time.Second
	DefaultMaxAttempts = 5
	DefaultGracePeriod = 10 * time.Second
	// DefaultAbandonAfter is how long a handler is waited for after its
	// context ended.
	DefaultAbandonAfter = time.Minute
	// DefaultMemberTTL is how long a worker's membership outlives its last
	// renewal (it renews every quarter of it).
	DefaultMemberTTL = 10 * time.Second
	// DefaultStealThreshold is the backlog of a shard above which workers
	// that do not own it pull from it too (overflow policy only).
	DefaultStealThreshold = 100
)

// Config configures a [Worker].
type Config struct {
	// Registry of handlers. Required. On a pools deployment the worker
	// receives only the types registered when it starts, and at least one.
	Registry *Registry
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// ID of the worker; default "<hostname>-<nuid>".
	ID string
	// Concurrency is how many tasks run at once. Default 16.
	Concurrency int
	// Shards this worker serves, fixed: no membership, no rebalancing.
	// Default none fixed: the worker joins the mesh (a lease on
	// AX_WORKERS/<ID>) and serves the shards the shared assignment
	// ([ShardTable] in AX_CONTROL) gives it, which change as workers join
	// and leave.
	Shards []int
	// Version the worker announces in its membership record. Default "dev".
	Version string
	// MemberTTL is how long the membership lease outlives its last renewal:
	// whole seconds, at least 4s. A worker that dies leaves the mesh after
	// it. Default 10s.
	MemberTTL time.Duration
	// StealThreshold: with the overflow priority policy, the worker also
	// pulls from shards it does not own once their undelivered backlog
	// reaches this many messages (work stealing; per-key order is given up
	// for those tasks). Default 100; -1 disables stealing. Ignored with
	// fixed Shards and with the other policies.
	StealThreshold int
	// PrefetchPerShard is how many messages of each (priority, shard)
	// consumer the worker holds at most before a slot takes them, those a
	// pull request still asks for included; a request asks for all of it
	// once every message of the previous one has been taken.
	// Default: enough to keep Concurrency busy, at least 1.
	PrefetchPerShard int
	// DefaultTimeout of a task whose type and message set none. Default 30s.
	DefaultTimeout time.Duration
	// DefaultMaxAttempts of a task whose type and message set none. Default 5.
	DefaultMaxAttempts int
	// MaxTimeout bounds a message's Ax-Timeout: a task asking for more is
	// dead-lettered with the reason. Default 24h ([streams.DefaultMaxTimeout]).
	MaxTimeout time.Duration
	// MaxDelay bounds how far ahead a message's Ax-Run-At may be: a task
	// asking for more is dead-lettered with the reason. Default 366 days.
	MaxDelay time.Duration
	// Backoff of retries for types that set none.
	Backoff Backoff
	// AckWait of the shard consumers ([streams.Config.AckWait]); held
	// messages get an in-progress heartbeat every third of it. Default
	// zero: read from the consumers when the worker starts. A non-zero
	// value must equal the consumers' ([ErrConfigMismatch] otherwise): a
	// worker that beats on a longer ack wait than the server's has its
	// tasks redelivered while they run.
	AckWait time.Duration
	// AbandonAfter is how long a handler that has not returned after its
	// context ended (timeout, cancel, stop) is waited for, holding its
	// task's claim (heartbeats go on) and its slot. Past it the task is
	// dead-lettered ([ErrHandlerStuck]), the slot is reused, and the
	// handler's goroutine is left running, counted in [Stats].Abandoned.
	// Default 1m: a task runs at most its timeout plus a minute.
	AbandonAfter time.Duration
	// GracePeriod is how long Stop lets running tasks finish before it
	// cancels them (they are put back, not failed). Default 10s.
	GracePeriod time.Duration
	// MaxResultBytes bounds a task's result ([Task.SetResult]): a larger
	// one fails the attempt permanently ([ErrResultTooLarge]). Default 64
	// KiB; its base64 form must fit in half the server's max_payload (the
	// result is stored in the task's record, which the server's
	// max_payload bounds: [New] refuses a larger bound).
	MaxResultBytes int
	// ProgressEvery is the least time between two progress writes of a
	// task ([Task.Progress]); reports in between are kept and the last one
	// written with the next write or the outcome. Default 1s.
	ProgressEvery time.Duration
	// Middleware wraps every handler, the first outermost, inside the
	// worker's built-ins [Recover], [Trace] and [TaskContext]
	// ([Middleware]). Default none.
	Middleware []Middleware
	// Logger. Default: warnings and errors as JSON lines on standard
	// error (zap's production encoding at warn level), so that a server
	// outage is not silent; zap.NewNop() silences it.
	Logger *zap.Logger
	// TracerProvider, when set, gives each delivery the spans "ax.task
	// <type>" (a consumer span, child of the trace context the task's
	// message carries: the submit's), "ax.claim", "ax.run <type>" (the
	// [Trace] middleware; the handler's context carries it) and
	// "ax.settle", with the task's id, type, tenant, priority and attempt.
	// Default nil: no spans.
	TracerProvider trace.TracerProvider
	// Observer hears about every settled attempt (metrics); nil: none.
	Observer Observer
	// Store configures the task record store.
	Store kv.StoreConfig
	// Test holds knobs for tests only.
	Test TestConfig

	mesh bool // no fixed Shards: join the mesh
}

// TestConfig holds test-only knobs.
type TestConfig struct {
	// DisableHeartbeats stops in-progress heartbeats, to let a held task's
	// ack wait lapse as if the worker were frozen.
	DisableHeartbeats bool
	// SkipHeartbeat, if set, is asked before each heartbeat with the
	// message's delivery count; true skips it, to let one delivery's
	// claim lapse while others keep theirs.
	SkipHeartbeat func(delivered uint64) bool
	// LoseClaimReply, if set, is asked after each claim write that landed,
	// with the message's delivery count; true makes the worker see an
	// error instead, as if the write's reply had been lost.
	LoseClaimReply func(delivered uint64) bool
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = cmp.Or(host, "worker") + "-" + nuid.Next()[14:] // the sequence part: the first 12 characters are the same in one process
	}
	out.Concurrency = cmp.Or(out.Concurrency, DefaultConcurrency)
	out.Version = cmp.Or(out.Version, "dev")
	out.MemberTTL = cmp.Or(out.MemberTTL, DefaultMemberTTL)
	out.StealThreshold = cmp.Or(out.StealThreshold, DefaultStealThreshold)
	if len(out.Shards) == 0 {
		out.mesh = true
		out.Shards = make([]int, streams.Shards)
		for i := range out.Shards {
			out.Shards[i] = i
		}
	}
	if out.PrefetchPerShard == 0 {
		out.PrefetchPerShard = max(1, min(64, 2*out.Concurrency/len(out.Shards)))
	}
	out.DefaultTimeout = cmp.Or(out.DefaultTimeout, DefaultTimeout)
	out.DefaultMaxAttempts = cmp.Or(out.DefaultMaxAttempts, DefaultMaxAttempts)
	out.MaxTimeout = cmp.Or(out.MaxTimeout, streams.DefaultMaxTimeout)
	out.MaxDelay = cmp.Or(out.MaxDelay, streams.DefaultMaxDelay)
	out.Backoff = out.Backoff.withDefaults()
	out.AbandonAfter = cmp.Or(out.AbandonAfter, DefaultAbandonAfter)
	out.GracePeriod = cmp.Or(out.GracePeriod, DefaultGracePeriod)
	out.MaxResultBytes = cmp.Or(out.MaxResultBytes, DefaultMaxResultBytes)
	out.ProgressEvery = cmp.Or(out.ProgressEvery, DefaultProgressEvery)
	if out.Logger == nil {
		out.Logger = stderrlog.New()
	}
	out.Store.Names = out.Names
	return &out
}

func (c *Config) validate() error {
	var errs []error
	if c.Registry == nil {
		errs = append(errs, errors.New("a Registry is required"))
	}
	if err := streams.ValidateTaskID(c.ID); err != nil {
		errs = append(errs, fmt.Errorf("ID: %w", err))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("the Concurrency %d must be positive", c.Concurrency))
	}
	for _, s := range c.Shards {
		if s < 0 || s >= streams.Shards {
			errs = append(errs, fmt.Errorf("shard %d is not 0..%d", s, streams.Shards-1))
		}
	}
	if c.AckWait != 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("AckWait %s must be at least 1s, or zero", c.AckWait))
	}
	if c.AbandonAfter < 0 {
		errs = append(errs, fmt.Errorf("AbandonAfter %s must be positive", c.AbandonAfter))
	}
	if c.MemberTTL < 4*time.Second || c.MemberTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("MemberTTL %s must be whole seconds, at least 4s", c.MemberTTL))
	}
	if c.MaxResultBytes < 1 {
		errs = append(errs, fmt.Errorf("MaxResultBytes %d must be positive", c.MaxResultBytes))
	}
	if c.ProgressEvery < 0 {
		errs = append(errs, fmt.Errorf("ProgressEvery %s must not be negative", c.ProgressEvery))
	}
	for i, m := range c.Middleware {
		if m == nil {
			errs = append(errs, fmt.Errorf("the Middleware at index %d is nil", i))
		}
	}
	if c.StealThreshold < 1 && c.StealThreshold != -1 {
		errs = append(errs, fmt.Errorf("StealThreshold %d must be positive, or -1", c.StealThreshold))
	}
	if c.PrefetchPerShard < 1 {
		errs = append(errs, fmt.Errorf("PrefetchPerShard %d must be positive", c.PrefetchPerShard))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}
