package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/stderrlog"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// LeaderKey is the key of the leader lease in the AX_LOCKS bucket.
const LeaderKey = "leader"

// ElectorConfig configures an [Elector].
type ElectorConfig struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// ID names this contender in the lease record. Default "<hostname>-<nuid>".
	ID string
	// TTL of the leader lease, whole seconds. Default 10s ([kv.DefaultLeaseTTL]).
	TTL time.Duration
	// RenewEvery is how often the leader renews. Default 3s, at most TTL/2.
	RenewEvery time.Duration
	// OnForeignValue, if set, hears (bucket, "taken_over") each time the
	// elector takes the lease over from a value that stayed unchanged for
	// a lease period ([kv.Lease]). It must not block.
	OnForeignValue func(bucket, action string)
	// Logger. Default: warnings and errors as JSON lines on standard
	// error (zap's production encoding at warn level), so that a server
	// outage is not silent; zap.NewNop() silences it.
	Logger *zap.Logger
}

func (c *ElectorConfig) withDefaults() *ElectorConfig {
	if c == nil {
		c = &ElectorConfig{}
	}
	out := *c
	if out.ID == "" {
		host, _ := os.Hostname()
		// The tail of a nuid: its first 12 characters are the same for
		// every nuid of the process, so two contenders would share them.
		out.ID = cmp.Or(host, "scheduler") + "-" + nuid.Next()[14:]
	}
	out.TTL = cmp.Or(out.TTL, kv.DefaultLeaseTTL)
	out.RenewEvery = cmp.Or(out.RenewEvery, min(kv.DefaultLeaseRenew, out.TTL/2))
	if out.Logger == nil {
		out.Logger = stderrlog.New()
	}
	return &out
}

// Elector runs leader election on the "leader" lease of AX_LOCKS.
//
// Safety: at most one contender leads at a time, because leading means
// holding the lease ([kv.Lease]), and a leader that cannot renew stops
// leading (its context ends) before its lease can have expired.
// Liveness: a contender that finds the lease held watches the key and tries
// again as soon as it is released or expires, so a new leader takes over
// within one TTL of the old one's last renewal (plus the server's expiry
// tick); without a watch event it still retries once per TTL. A value the
// key keeps without renewal, which no TTL expires (one ax did not write: a
// publish acknowledgement a producer pointed at the key with its reply
// subject), is taken over once a contender saw it unchanged for a TTL
// ([kv.Lease]): within about two TTLs of its write.
type Elector struct {
	cfg     *ElectorConfig
	lease   *kv.Lease
	bucket  jetstream.KeyValue
	log     *zap.Logger
	leading atomic.Bool
}

// NewElector binds an elector to the locks bucket, which [kv.Provision] creates.
func NewElector(ctx context.Context, js jetstream.JetStream, cfg *ElectorConfig) (*Elector, error) {
	cfg = cfg.withDefaults()
	bucket := cfg.Names.LocksBucket()
	log := cfg.Logger.Named("scheduler.leader").With(zap.String("contender", cfg.ID))
	lease, err := kv.NewLease(ctx, js, &kv.LeaseConfig{Bucket: bucket, Key: LeaderKey, Holder: cfg.ID, TTL: cfg.TTL, RenewEvery: cfg.RenewEvery,
		TakeOverFunc: func(prev kv.TakenOver) { takenOver(log, cfg, bucket, prev) }})
	if err != nil {
		return nil, fmt.Errorf("new elector: %w", err)
	}
	kvb, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("new elector: bind %s: %w", bucket, err)
	}
	return &Elector{cfg: cfg, lease: lease, bucket: kvb, log: log}, nil
}

// takenOver reports a takeover of the leader lease: a warning, and the
// hook. A foreign value is an alert: someone wrote the lease key (a
// producer's reply subject, under a deployment whose producers share the
// AX account: docs/SECURITY.md).
func takenOver(log *zap.Logger, cfg *ElectorConfig, bucket string, prev kv.TakenOver) {
	if prev.Foreign {
		log.Warn("leader_lease_taken_over_from_foreign_value", zap.Uint64("revision", prev.Revision),
			zap.ByteString("value", prev.Value), zap.Duration("unchanged", prev.Unchanged))
	} else {
		log.Warn("leader_lease_taken_over", zap.String("holder", prev.Holder), zap.Uint64("revision", prev.Revision),
			zap.Duration("unchanged", prev.Unchanged))
	}
	if cfg.OnForeignValue != nil {
		cfg.OnForeignValue(bucket, "taken_over")
	}
}

// ID returns the contender's id.
func (e *Elector) ID() string { return e.cfg.ID }

// Leading reports whether this contender leads now.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Held reports, synchronously and without I/O, whether this contender leads
// and its lease is still valid by the local clock ([kv.Lease.Held]). Every
// leader write is made only after it answers true (a move's, its record's
// compare-and-set: the move's guard): a leader frozen past its lease
// (SIGSTOP, a long pause) finds it false the moment it wakes, even before
// its guarded context ends, and stays false until it wins again.
func (e *Elector) Held() bool { return e.leading.Load() && e.lease.Held() }

// Leader returns the current leader's id, or "" when nobody leads.
func (e *Elector) Leader(ctx context.Context) (string, error) {
	rec, err := e.lease.Current(ctx)
	if errors.Is(err, kv.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return rec.Holder, nil
}

// Run campaigns until ctx ends. Each time it wins, it calls lead with a
// context that ends when leadership is lost (cause [kv.ErrLeaseLost]) or
// ctx ends, waits for lead to return, releases the lease and campaigns
// again. It returns nil when ctx ends.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) error {
	for ctx.Err() == nil {
		guarded, release, err := e.lease.Hold(ctx)
		switch {
		case err == nil:
			e.runAsLeader(guarded, release, lead)
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, kv.ErrLeaseHeld):
			e.waitVacant(ctx)
		default:
			e.log.Warn("campaign_failed", zap.Error(err))
			sleep(ctx, time.Second)
		}
	}
	return nil
}

// runAsLeader runs lead for as long as the lease holds.
func (e *Elector) runAsLeader(guarded context.Context, release func(), lead func(context.Context)) {
	e.leading.Store(true)
	e.log.Info("leader_elected", zap.Uint64("lease_revision", e.lease.Revision()))
	lead(guarded)
	e.leading.Store(false)
	release()
	e.log.Info("leader_stepped_down", zap.NamedError("cause", context.Cause(guarded)))
}

// waitVacant returns when the leader key is deleted or expires, after one
// TTL at most, or when ctx ends.
func (e *Elector) waitVacant(ctx context.Context) {
	fallback := time.NewTimer(e.cfg.TTL)
	defer fallback.Stop()
	w, err := e.bucket.Watch(ctx, LeaderKey, jetstream.UpdatesOnly())
	if err != nil {
		e.log.Warn("watch_leader_failed", zap.Error(err))
		sleep(ctx, e.cfg.RenewEvery)
		return
	}
	defer func() { _ = kv.StopWatch(w) }()
	// The key may have gone between the failed acquire and the watch.
	if _, err := e.bucket.Get(ctx, LeaderKey); errors.Is(err, jetstream.ErrKeyNotFound) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-fallback.C:
			return
		case entry, ok := <-w.Updates():
			if !ok {
				return
			}
			if entry != nil && entry.Operation() != jetstream.KeyValuePut {
				return // released (delete) or expired (limit marker)
			}
		}
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
