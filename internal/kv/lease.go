package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lease defaults, as docs/WIRE.md sets them.
const (
	DefaultLeaseTTL   = 10 * time.Second
	DefaultLeaseRenew = 3 * time.Second
)

// LeaseConfig configures a [Lease].
type LeaseConfig struct {
	// Bucket holding the lease, e.g. AX_LOCKS or AX_WORKERS. Required; it
	// must allow per-key TTLs (LimitMarkerTTL), as [Provision] makes them.
	Bucket string
	// Key of the lease, e.g. "leader" or "lock.<name>". Required.
	Key string
	// Holder names who holds it (a process or worker id). Required.
	Holder string
	// TTL after which an unrenewed lease expires; whole seconds, at least
	// 1s. Default 10s.
	TTL time.Duration
	// RenewEvery is how often [Lease.Hold] renews. Default 3s; at most TTL/2.
	RenewEvery time.Duration
	// TakeOverFunc, if set, is called (with mu held: it must not call the
	// lease) each time [Lease.Acquire] takes the key over from a value that
	// stayed unchanged for a lease period: a holder that stopped renewing,
	// or a value ax did not write (see [Lease]). prev is that value; its
	// holder is "" when it is not a lease record.
	TakeOverFunc func(prev TakenOver)
}

// TakenOver describes the value a [Lease] took its key over from.
type TakenOver struct {
	Revision uint64
	// Holder named in the value, or "" when the value is not a lease
	// record (Foreign).
	Holder string
	// Foreign is true when the value does not decode as a lease record
	// naming a holder: ax did not write it (a publish acknowledgement
	// the server sent to a reply subject naming the key, say).
	Foreign bool
	// Value is the value taken over, at most 256 bytes of it.
	Value []byte
	// Unchanged is how long the value was seen unchanged.
	Unchanged time.Duration
}

// LeaseRecord is the value of a lease key.
type LeaseRecord struct {
	Holder     string          `json:"holder"`
	AcquiredAt time.Time       `json:"acquired_at"`
	RenewedAt  time.Time       `json:"renewed_at"`
	TTL        Duration        `json:"ttl"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// Lease is a named lease with a per-key TTL in a KV bucket: acquired by
// create-if-absent, renewed and released only by compare-and-set on the
// revision its holder got, which makes the revision a fencing token.
//
// Safety: at most one holder at a time, because acquiring is a create that
// fails while the key exists and the key exists until its holder releases
// it or its TTL runs out. A holder whose renewal fails stops guarding
// ([Lease.Hold]) before its TTL can have run out, so an expired holder never
// acts alongside the next one. Liveness: a lease whose holder died expires
// after its TTL and can then be acquired.
//
// A value the key keeps without renewal (one without a per-key TTL: a
// publish acknowledgement the server wrote there because a publisher named
// the key as its reply subject, which no holder renews and the server never
// expires) is taken over: an acquire that finds the same revision it found
// at least a lease period (the larger of its TTL and the TTL the value
// names) earlier replaces it by compare-and-set on that revision. That is
// safe for the same reason expiry is: a holder's last write is older than
// the first sight of its revision, so its hold lapsed ([Lease.Held]) before
// the period ends, and the compare-and-set fails if anyone wrote meanwhile.
//
// The guarded context ends asynchronously (a timer's goroutine), so a
// holder that was frozen (SIGSTOP, a long GC pause, a suspended VM) may run
// on for a moment after it wakes. [Lease.Held] closes that gap: it is a
// synchronous check against the local monotonic clock, and a holder calls
// it right before each write it guards.
type Lease struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream
	cfg LeaseConfig
	// markerTTL is the bucket's LimitMarkerTTL: a release leaves a marker
	// that lives as long (0: a plain delete, whose marker stays).
	markerTTL time.Duration

	// base is the origin of validUntil on the monotonic clock.
	base time.Time
	// validUntil is when the hold stops being trusted, in nanoseconds since
	// base: the send time of the last confirmed acquire or renewal plus the
	// TTL minus a margin.
	validUntil atomic.Int64
	// lapsed is set once the hold was found past validUntil, lost or
	// released; only a new acquire clears it (sticky).
	lapsed atomic.Bool

	mu       sync.Mutex
	rev      uint64    // revision of the holder's last write; 0 when not held (mu)
	acquired time.Time // (mu)
	data     []byte    // (mu)
	// seenRev is the revision of the key a failed acquire found, and
	// seenAt when it first found it (mu): a revision that stays for a
	// lease period is taken over ([Lease.Acquire]).
	seenRev uint64
	seenAt  time.Time
}

// NewLease binds a lease to its bucket. A nil cfg is an empty one, which
// fails validation: Bucket, Key and Holder have no default.
func NewLease(ctx context.Context, js jetstream.JetStream, cfg *LeaseConfig) (*Lease, error) {
	var c LeaseConfig
	if cfg != nil {
		c = *cfg
	}
	c.TTL = cmp.Or(c.TTL, DefaultLeaseTTL)
	c.RenewEvery = cmp.Or(c.RenewEvery, min(DefaultLeaseRenew, c.TTL/2))
	switch {
	case c.Bucket == "" || c.Key == "" || c.Holder == "":
		return nil, errors.New("lease config: Bucket, Key and Holder are required")
	case c.TTL < time.Second || c.TTL%time.Second != 0:
		return nil, fmt.Errorf("lease config: TTL %s must be whole seconds, at least 1s", c.TTL)
	case c.RenewEvery > c.TTL/2:
		return nil, fmt.Errorf("lease config: RenewEvery %s must be at most half the TTL %s", c.RenewEvery, c.TTL)
	}
	kv, err := js.KeyValue(ctx, c.Bucket)
	if err != nil {
		return nil, fmt.Errorf("bind lease bucket %s: %w", c.Bucket, err)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bind lease bucket %s: %w", c.Bucket, err)
	}
	l := &Lease{kv: kv, js: js, cfg: c, base: time.Now(), markerTTL: status.LimitMarkerTTL()}
	l.lapsed.Store(true)
	return l, nil
}

// margin is how much earlier than the server's expiry the holder stops
// trusting its hold: half a renewal period, for clock-rate differences and
// the time a write takes to reach the server.
func (l *Lease) margin() time.Duration { return l.cfg.RenewEvery / 2 }

// confirm records a write of the lease sent at sent and confirmed by the
// server: the hold is trusted until sent + TTL - margin. A confirmation of
// a hold that lapsed meanwhile is ignored, unless it is a new acquire.
func (l *Lease) confirm(sent time.Time, acquire bool) {
	if !acquire && l.lapsed.Load() {
		return
	}
	l.validUntil.Store(int64(sent.Sub(l.base) + l.cfg.TTL - l.margin()))
	if acquire {
		l.lapsed.Store(false)
	}
}

// Held reports, without any I/O, whether this holder may still act under
// the lease: it holds it, and less than TTL minus a margin has passed (on
// the monotonic clock, which runs on while the process is frozen) since the
// send of the last renewal the server confirmed. Once false it stays false
// until the next [Lease.Acquire]: a renewal confirmed after the hold lapsed
// does not revive it. Call it right before every write the lease guards.
func (l *Lease) Held() bool {
	if l.lapsed.Load() {
		return false
	}
	if time.Since(l.base) >= time.Duration(l.validUntil.Load()) {
		l.lapsed.Store(true)
		return false
	}
	return true
}

// SetData sets the application data written with the next acquire or renew
// (for example a worker's membership record). data must be JSON.
func (l *Lease) SetData(data []byte) {
	l.mu.Lock()
	l.data = data
	l.mu.Unlock()
}

// Revision returns the fencing token of the current hold, or 0 if not held.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Acquire takes the lease if nobody holds it, or if the key kept the
// revision this lease found there at least a lease period ago (a holder
// that stopped renewing, or a value ax did not write: see [Lease]). It
// returns [ErrLeaseHeld] naming the holder otherwise.
func (l *Lease) Acquire(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := time.Now()
	now := sent.UTC()
	value, err := l.value(now, now)
	if err != nil {
		return 0, err
	}
	rev, err := l.kv.Create(ctx, l.cfg.Key, value, jetstream.KeyTTL(l.cfg.TTL))
	if IsRevisionMismatch(err) {
		rev, err = l.takeOver(ctx, value)
	}
	if err != nil {
		return 0, fmt.Errorf("acquire lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, err)
	}
	l.rev, l.acquired = rev, now
	l.seenRev = 0
	l.confirm(sent, true)
	return rev, nil
}

// takeOver is an acquire that found the key (mu must be held): it replaces
// the value by compare-and-set on its revision if this lease saw that
// revision at least a lease period ago, else it returns [ErrLeaseHeld]
// naming the holder and notes the revision.
func (l *Lease) takeOver(ctx context.Context, value []byte) (uint64, error) {
	entry, err := l.kv.Get(ctx, l.cfg.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("%w: another holder (released meanwhile)", ErrLeaseHeld)
	}
	if err != nil {
		return 0, err
	}
	prev := TakenOver{Revision: entry.Revision(), Foreign: true, Value: entry.Value()[:min(len(entry.Value()), 256)]}
	period := l.cfg.TTL
	var rec LeaseRecord
	if json.Unmarshal(entry.Value(), &rec) == nil && rec.Holder != "" {
		prev.Holder, prev.Foreign = rec.Holder, false
		period = max(period, time.Duration(rec.TTL))
	}
	now := time.Now()
	if entry.Revision() != l.seenRev {
		l.seenRev, l.seenAt = entry.Revision(), now
	}
	if prev.Unchanged = now.Sub(l.seenAt); prev.Unchanged < period {
		if prev.Foreign {
			return 0, fmt.Errorf("%w: a value ax did not write (revision %d; taken over once unchanged for %s)", ErrLeaseHeld, prev.Revision, period)
		}
		return 0, fmt.Errorf("%w: %s", ErrLeaseHeld, prev.Holder)
	}
	rev, err := updateWithTTL(ctx, l.js, l.cfg.Bucket, l.cfg.Key, value, l.cfg.TTL, entry.Revision())
	if IsRevisionMismatch(err) {
		return 0, fmt.Errorf("%w: another holder (taken over meanwhile)", ErrLeaseHeld)
	}
	if err != nil {
		return 0, fmt.Errorf("take over from revision %d: %w", entry.Revision(), err)
	}
	if l.cfg.TakeOverFunc != nil {
		l.cfg.TakeOverFunc(prev)
	}
	return rev, nil
}

// Renew extends the lease by its TTL, by compare-and-set on the revision of
// the holder's last write. It returns [ErrLeaseLost] if the lease expired or
// another holder took it; the caller must stop the work it guards.
func (l *Lease) Renew(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 {
		return 0, fmt.Errorf("renew lease %s/%s: %w: not held", l.cfg.Bucket, l.cfg.Key, ErrLeaseLost)
	}
	if !l.Held() {
		// Lapsed on the local clock (frozen, or renewals failed): the
		// server may have expired it and another holder acted. Keep rev,
		// so that Release can still delete the key if it is ours.
		return 0, fmt.Errorf("renew lease %s/%s: %w: lapsed before it was renewed", l.cfg.Bucket, l.cfg.Key, ErrLeaseLost)
	}
	sent := time.Now()
	value, err := l.value(l.acquired, sent.UTC())
	if err != nil {
		return 0, err
	}
	rev, err := updateWithTTL(ctx, l.js, l.cfg.Bucket, l.cfg.Key, value, l.cfg.TTL, l.rev)
	if IsRevisionMismatch(err) {
		l.rev = 0
		l.lapsed.Store(true)
		return 0, fmt.Errorf("renew lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, ErrLeaseLost)
	}
	if err != nil {
		return 0, fmt.Errorf("renew lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, err)
	}
	l.rev = rev
	l.confirm(sent, false)
	return l.rev, nil
}

// Release gives the lease up, by compare-and-set on the holder's revision:
// a holder whose lease expired cannot delete its successor's ([ErrLeaseLost]).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 {
		return fmt.Errorf("release lease %s/%s: %w: not held", l.cfg.Bucket, l.cfg.Key, ErrLeaseLost)
	}
	l.lapsed.Store(true)
	// Its marker expires, as an expired lease's does ([DeleteKey]): else
	// every listing of the members would read the key again, one more per
	// worker that ever stopped.
	err := deleteKey(ctx, l.kv, l.cfg.Key, l.rev, l.markerTTL)
	l.rev = 0
	if IsRevisionMismatch(err) {
		return fmt.Errorf("release lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("release lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, err)
	}
	return nil
}

// Hold acquires the lease and keeps renewing it until ctx ends, the lease
// is lost, or release is called. The returned context is cancelled with
// cause [ErrLeaseLost] before the TTL of the last successful renewal can
// have run out, so the work it guards stops in time even when the bucket is
// unreachable. release stops renewing and releases the lease.
func (l *Lease) Hold(ctx context.Context) (guarded context.Context, release func(), err error) {
	sent := time.Now()
	if _, err := l.Acquire(ctx); err != nil {
		return nil, nil, err
	}
	guarded, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.keep(guarded, cancel, stop, sent)
	}()
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(stop)
			<-done
			cancel(context.Canceled)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer rcancel()
			_ = l.Release(rctx)
		})
	}
	return guarded, release, nil
}

// keep renews every RenewEvery. The lease is known valid until the send
// time of the last successful write plus the TTL; a timer independent of
// the renewals cancels the guarded context half a renewal period before
// that, even while a renewal is blocked on an unreachable server.
func (l *Lease) keep(ctx context.Context, cancel context.CancelCauseFunc, stop <-chan struct{}, sent time.Time) {
	margin := l.margin()
	lost := func() {
		l.lapsed.Store(true)
		cancel(fmt.Errorf("%w: no renewal of %s/%s within its TTL", ErrLeaseLost, l.cfg.Bucket, l.cfg.Key))
	}
	expire := time.AfterFunc(time.Until(sent.Add(l.cfg.TTL-margin)), lost)
	defer expire.Stop()
	tick := time.NewTicker(l.cfg.RenewEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		attempt := time.Now()
		validUntil := attempt.Add(l.cfg.TTL - margin)
		rctx, rcancel := context.WithDeadline(ctx, attempt.Add(l.cfg.RenewEvery))
		_, err := l.Renew(rctx)
		rcancel()
		switch {
		case errors.Is(err, ErrLeaseLost):
			cancel(err)
			return
		case err == nil && ctx.Err() == nil:
			expire.Reset(time.Until(validUntil))
		}
	}
}

// Current returns the lease's record, or [ErrNotFound] when nobody holds it.
func (l *Lease) Current(ctx context.Context) (LeaseRecord, error) { return l.current(ctx) }

func (l *Lease) current(ctx context.Context) (LeaseRecord, error) {
	var rec LeaseRecord
	entry, err := l.kv.Get(ctx, l.cfg.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, fmt.Errorf("lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, ErrNotFound)
	}
	if err != nil {
		return rec, fmt.Errorf("lease %s/%s: %w", l.cfg.Bucket, l.cfg.Key, err)
	}
	if err := json.Unmarshal(entry.Value(), &rec); err != nil || rec.Holder == "" {
		return rec, fmt.Errorf("lease %s/%s (revision %d): holds a value ax did not write (taken over once unchanged for a lease period)", l.cfg.Bucket, l.cfg.Key, entry.Revision())
	}
	return rec, nil
}

// value encodes the lease record (mu must be held).
func (l *Lease) value(acquired, renewed time.Time) ([]byte, error) {
	return json.Marshal(LeaseRecord{Holder: l.cfg.Holder, AcquiredAt: acquired, RenewedAt: renewed, TTL: Duration(l.cfg.TTL), Data: l.data})
}
