package worker

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultConcurrency = 16
	DefaultTimeout     = 30 * time.Second
	DefaultMaxAttempts = 5
	DefaultGracePeriod = 10 * time.Second
)

// Config configures a [Worker].
type Config struct {
	// Registry of handlers. Required.
	Registry *Registry
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// ID of the worker; default "<hostname>-<nuid>".
	ID string
	// Concurrency is how many tasks run at once. Default 16.
	Concurrency int
	// Shards this worker serves. Default all.
	Shards []int
	// PrefetchPerShard is how many messages each (priority, shard) consumer
	// pulls ahead. Default: enough to keep Concurrency busy, at least 1.
	PrefetchPerShard int
	// DefaultTimeout of a task whose type and message set none. Default 30s.
	DefaultTimeout time.Duration
	// DefaultMaxAttempts of a task whose type and message set none. Default 5.
	DefaultMaxAttempts int
	// Backoff of retries for types that set none.
	Backoff Backoff
	// AckWait of the shard consumers ([streams.Config.AckWait]); held
	// messages get an in-progress heartbeat every third of it. Default 30s.
	AckWait time.Duration
	// GracePeriod is how long Stop lets running tasks finish before it
	// cancels them (they are put back, not failed). Default 10s.
	GracePeriod time.Duration
	// Logger; default zap.NewNop().
	Logger *zap.Logger
	// Observer hears about every settled attempt (metrics); nil: none.
	Observer Observer
	// Store configures the task record store.
	Store kv.StoreConfig
	// Test holds knobs for tests only.
	Test TestConfig
}

// TestConfig holds test-only knobs.
type TestConfig struct {
	// DisableHeartbeats stops in-progress heartbeats, to let a held task's
	// ack wait lapse as if the worker were frozen.
	DisableHeartbeats bool
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.Names == (streams.Names{}) {
		out.Names = streams.DefaultNames()
	}
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = cmp.Or(host, "worker") + "-" + nuid.Next()[:8]
	}
	out.Concurrency = cmp.Or(out.Concurrency, DefaultConcurrency)
	if len(out.Shards) == 0 {
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
	out.Backoff = out.Backoff.withDefaults()
	out.AckWait = cmp.Or(out.AckWait, streams.DefaultAckWait)
	out.GracePeriod = cmp.Or(out.GracePeriod, DefaultGracePeriod)
	if out.Logger == nil {
		out.Logger = zap.NewNop()
	}
	out.Store.Names = out.Names
	return &out
}

func (c *Config) validate() error {
	var errs []error
	if c.Registry == nil {
		errs = append(errs, errors.New("Registry is required"))
	}
	if err := streams.ValidateTaskID(c.ID); err != nil {
		errs = append(errs, fmt.Errorf("ID: %w", err))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("Concurrency %d must be positive", c.Concurrency))
	}
	for _, s := range c.Shards {
		if s < 0 || s >= streams.Shards {
			errs = append(errs, fmt.Errorf("shard %d is not 0..%d", s, streams.Shards-1))
		}
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("AckWait %s must be at least 1s", c.AckWait))
	}
	if c.PrefetchPerShard < 1 {
		errs = append(errs, fmt.Errorf("PrefetchPerShard %d must be positive", c.PrefetchPerShard))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}
