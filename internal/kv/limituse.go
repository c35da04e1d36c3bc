package kv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// limitTries bounds the compare-and-set rounds of one change of a limit's
// use; past it the change fails with [ErrConflict].
const limitTries = 32

// LimitUse keeps the use of the mesh-wide limits ([Limits]) in the limits
// bucket (AX_LIMITS): per concurrency limit one key, "c.<hash>", holding
// the slots held and when each expires; per rate limit one key,
// "r.<hash>", holding a token bucket. Every change is a compare-and-set on
// the revision read, so two workers never take the same last slot or
// token. A slot names its holder and expires unless renewed: a worker that
// dies holding slots gives them back within their TTL.
type LimitUse struct {
	bucket jetstream.KeyValue
}

// NewLimitUse binds the limits bucket of names.
func NewLimitUse(ctx context.Context, js jetstream.JetStream, names streams.Names) (*LimitUse, error) {
	b, err := js.KeyValue(ctx, names.LimitsBucket())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", names.LimitsBucket(), err)
	}
	return &LimitUse{bucket: b}, nil
}

// SlotsKey returns the key of target's concurrency slots in AX_LIMITS:
// "c." and the first 32 hex digits of the SHA-256 of the target.
func SlotsKey(target string) string { return "c." + targetHash(target) }

// RateKey returns the key of target's token bucket in AX_LIMITS: "r." and
// the first 32 hex digits of the SHA-256 of the target.
func RateKey(target string) string { return "r." + targetHash(target) }

func targetHash(target string) string {
	sum := sha256.Sum256([]byte(target))
	return hex.EncodeToString(sum[:16])
}

// Slots is the value of a concurrency limit's key: the slots held, each
// by a holder (a worker id, "/" and a token of the execution) until its
// expiry (Unix milliseconds).
type Slots struct {
	Target  string           `json:"target"`
	Holders map[string]int64 `json:"holders"`
}

// live drops the slots expired at now and returns how many remain.
func (s *Slots) live(now time.Time) int {
	for h, exp := range s.Holders {
		if exp <= now.UnixMilli() {
			delete(s.Holders, h)
		}
	}
	return len(s.Holders)
}

// TokenBucket is the value of a rate limit's key: the tokens left at At
// (Unix nanoseconds); they grow by the rate per second up to the burst.
type TokenBucket struct {
	Target string  `json:"target"`
	Tokens float64 `json:"tokens"`
	At     int64   `json:"at"`
	// Reserved are the tokens promised to tasks being claimed, each by a
	// holder until its expiry (Unix milliseconds) ([LimitUse.Reserve]):
	// they are not taken yet, but no other task is admitted for them.
	Reserved map[string]int64 `json:"reserved,omitempty"`
}

// unreserved drops the reservations expired at now (and holder's, if not
// empty) and returns the tokens left to reserve.
func (b *TokenBucket) unreserved(now time.Time, holder string) float64 {
	for h, exp := range b.Reserved {
		if exp <= now.UnixMilli() || h == holder {
			delete(b.Reserved, h)
		}
	}
	if len(b.Reserved) == 0 {
		b.Reserved = nil
	}
	return b.Tokens - float64(len(b.Reserved))
}

// limitValue is the value of a key of AX_LIMITS: it knows its target.
type limitValue interface {
	targetOf() string
}

func (s *Slots) targetOf() string       { return s.Target }
func (b *TokenBucket) targetOf() string { return b.Target }

// change reads target's key, lets fn change the decoded value v (found
// false: no key) and writes it back by compare-and-set when fn says so,
// trying again on a conflict.
//
// A value that ax did not write (it does not decode, or names another
// target: a publish acknowledgement written over the key through a reply
// subject, say) is foreign: v is then the zero value and foreign the time
// the server stored it, so that fn can hold the limit back for as long as
// the slots or tokens the foreign value hides may still be in use. A write
// replaces it.
func change[T any, P interface {
	*T
	limitValue
}](ctx context.Context, u *LimitUse, target, key string, fn func(v *T, found bool, foreign time.Time) (write bool, err error)) error {
	for range limitTries {
		var v T
		var rev uint64
		var foreign time.Time
		entry, err := u.bucket.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read %s: %w", key, err)
		case entry.Operation() == jetstream.KeyValuePut:
			rev = entry.Revision()
			if err := json.Unmarshal(entry.Value(), &v); err != nil || P(&v).targetOf() != target {
				v, foreign = *new(T), entry.Created()
			}
		default:
			rev = entry.Revision()
		}
		write, err := fn(&v, rev != 0, foreign)
		if err != nil || !write {
			return err
		}
		data, err := json.Marshal(&v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", key, err)
		}
		if rev == 0 {
			_, err = u.bucket.Create(ctx, key, data)
		} else {
			_, err = u.bucket.Update(ctx, key, data, rev)
		}
		if IsRevisionMismatch(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		return nil
	}
	return fmt.Errorf("write %s: %w", key, ErrConflict)
}

// Acquire takes one of target's n slots for holder, until now + ttl, and
// reports whether it got one (false: all n are held).
func (u *LimitUse) Acquire(ctx context.Context, target string, n int, holder string, ttl time.Duration) (bool, error) {
	got, err := u.AcquireSome(ctx, target, n, []string{holder}, ttl)
	return len(got) == 1, err
}

// AcquireSome takes as many of target's n slots as are free, up to one
// for each of holders (in their order), until now + ttl, in one
// compare-and-set, and returns the holders that got one (none: all n are
// held). A worker with several tasks waiting for the limit takes their
// slots in one write instead of racing itself for each.
func (u *LimitUse) AcquireSome(ctx context.Context, target string, n int, holders []string, ttl time.Duration) ([]string, error) {
	var got []string
	err := change(ctx, u, target, SlotsKey(target), func(s *Slots, _ bool, foreign time.Time) (bool, error) {
		now := time.Now()
		got = got[:0]
		if !foreign.IsZero() && now.Before(foreign.Add(ttl)) {
			// The slots' value was overwritten: whoever held them may run
			// until their trust lapses, within a TTL of the overwrite.
			return false, nil
		}
		if s.Holders == nil {
			s.Holders = map[string]int64{}
		}
		s.Target = target
		free := n - s.live(now)
		for _, h := range holders {
			if len(got) >= free {
				break
			}
			if _, held := s.Holders[h]; held {
				continue
			}
			s.Holders[h] = now.Add(ttl).UnixMilli()
			got = append(got, h)
		}
		return len(got) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}

// Release gives holder's slot of target back (nothing if it holds none).
func (u *LimitUse) Release(ctx context.Context, target, holder string) error {
	return change(ctx, u, target, SlotsKey(target), func(s *Slots, _ bool, _ time.Time) (bool, error) {
		if _, ok := s.Holders[holder]; !ok {
			return false, nil
		}
		delete(s.Holders, holder)
		s.live(time.Now())
		return true, nil
	})
}

// Renew extends the slots of target that holders hold to now + ttl. It
// returns the holders whose slot had expired (given to others meanwhile,
// or soon): they are not renewed.
func (u *LimitUse) Renew(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	var lost []string
	err := change(ctx, u, target, SlotsKey(target), func(s *Slots, _ bool, _ time.Time) (bool, error) {
		now := time.Now()
		lost = lost[:0]
		s.live(now)
		for _, h := range holders {
			if _, ok := s.Holders[h]; !ok {
				lost = append(lost, h)
				continue
			}
			s.Holders[h] = now.Add(ttl).UnixMilli()
		}
		return len(lost) < len(holders), nil
	})
	return lost, err
}

// InUse returns how many of target's slots are held now.
func (u *LimitUse) InUse(ctx context.Context, target string) (int, error) {
	n := 0
	err := change(ctx, u, target, SlotsKey(target), func(s *Slots, _ bool, _ time.Time) (bool, error) {
		n = s.live(time.Now())
		return false, nil
	})
	return n, err
}

// refill brings b to now under rate and capacity. A bucket whose value
// was foreign starts empty at the time the foreign value was stored: the
// starts it hid may have been taken just before.
func (b *TokenBucket) refill(now time.Time, rate float64, capacity float64, found bool, foreign time.Time) {
	if !foreign.IsZero() {
		b.Tokens, b.At, b.Reserved = 0, foreign.UnixNano(), nil
	}
	if !found {
		b.Tokens, b.At = capacity, now.UnixNano()
		return
	}
	if elapsed := now.UnixNano() - b.At; elapsed > 0 {
		b.Tokens = min(capacity, b.Tokens+rate*float64(elapsed)/float64(time.Second))
		b.At = now.UnixNano()
	}
}

// Reserve promises holder, until now + ttl, a start of target's token
// bucket (rate per second, at most max(burst, 1) at once) that no other
// reservation has: the start itself is taken later, by [LimitUse.Take],
// when the task is about to run. It returns 0 if it reserved one, else
// how long until one is due.
func (u *LimitUse) Reserve(ctx context.Context, target string, rate float64, burst int, holder string, ttl time.Duration) (time.Duration, error) {
	capacity := float64(max(burst, 1))
	var wait time.Duration
	err := change(ctx, u, target, RateKey(target), func(b *TokenBucket, found bool, foreign time.Time) (bool, error) {
		now := time.Now()
		b.Target = target
		b.refill(now, rate, capacity, found, foreign)
		if free := b.unreserved(now, holder); free < 1 {
			wait = time.Duration((1 - free) / rate * float64(time.Second))
			return false, nil
		}
		wait = 0
		if b.Reserved == nil {
			b.Reserved = map[string]int64{}
		}
		b.Reserved[holder] = now.Add(ttl).UnixMilli()
		return true, nil
	})
	return wait, err
}

// Unreserve drops holder's reservation of target (nothing if it has
// none).
func (u *LimitUse) Unreserve(ctx context.Context, target, holder string) error {
	return change(ctx, u, target, RateKey(target), func(b *TokenBucket, _ bool, _ time.Time) (bool, error) {
		if _, ok := b.Reserved[holder]; !ok {
			return false, nil
		}
		b.unreserved(time.Now(), holder)
		return true, nil
	})
}

// Take takes one start from target's token bucket (rate per second, at
// most max(burst, 1) at once), for holder's reservation if it has one
// (dropped either way; holder may be empty). It returns 0 if it took one,
// else how long until a token is due. The starts it gives are at most
// max(burst, 1) + rate × t in any t, reservations or not.
func (u *LimitUse) Take(ctx context.Context, target string, rate float64, burst int, holder string) (time.Duration, error) {
	capacity := float64(max(burst, 1))
	var wait time.Duration
	err := change(ctx, u, target, RateKey(target), func(b *TokenBucket, found bool, foreign time.Time) (bool, error) {
		now := time.Now()
		b.Target = target
		b.refill(now, rate, capacity, found, foreign)
		_, reserved := b.Reserved[holder]
		b.unreserved(now, holder)
		if b.Tokens < 1 {
			wait = time.Duration((1 - b.Tokens) / rate * float64(time.Second))
			return reserved, nil
		}
		wait = 0
		b.Tokens--
		return true, nil
	})
	return wait, err
}

// Tokens returns the tokens target's bucket holds now.
func (u *LimitUse) Tokens(ctx context.Context, target string, rate float64, burst int) (float64, error) {
	var tokens float64
	err := change(ctx, u, target, RateKey(target), func(b *TokenBucket, found bool, foreign time.Time) (bool, error) {
		b.refill(time.Now(), rate, float64(max(burst, 1)), found, foreign)
		tokens = b.Tokens
		return false, nil
	})
	return tokens, err
}

// WatchSlots watches the slots of every concurrency limit (the keys
// "c.*"): each change, as it is written. A worker whose tasks wait for a
// full limit learns from it that another worker gave back a slot.
func (u *LimitUse) WatchSlots(ctx context.Context) (jetstream.KeyWatcher, error) {
	w, err := u.bucket.Watch(ctx, "c.*", jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch slots: %w", err)
	}
	return w, nil
}

// SlotsHeld decodes a concurrency limit's slots ([Slots], the value of a
// "c." key) and returns its target and how many of its slots are held at
// now.
func SlotsHeld(data []byte, now time.Time) (string, int, error) {
	var s Slots
	if err := json.Unmarshal(data, &s); err != nil {
		return "", 0, fmt.Errorf("decode slots: %w", err)
	}
	return s.Target, s.live(now), nil
}
