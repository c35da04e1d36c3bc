package worker

import (
	"math/rand/v2"
	"time"
)

// Backoff computes retry delays: min(Cap, Base·2^(attempt-1)) + uniform(0,
// Jitter·Base), where attempt is the attempt that just failed (1 for the
// first). With the defaults the first retry waits 200–300 ms.
type Backoff struct {
	Base   time.Duration // default 200ms
	Cap    time.Duration // default 30s
	Jitter float64       // fraction of Base added at random; default 0.5
}

// Backoff defaults.
const (
	DefaultBackoffBase   = 200 * time.Millisecond
	DefaultBackoffCap    = 30 * time.Second
	DefaultBackoffJitter = 0.5
)

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = DefaultBackoffBase
	}
	if b.Cap <= 0 {
		b.Cap = DefaultBackoffCap
	}
	if b.Jitter <= 0 {
		b.Jitter = DefaultBackoffJitter
	}
	return b
}

// Delay returns the wait before the attempt after attempt.
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	d := b.Cap
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 32 {
		if exp := b.Base << (attempt - 1); exp > 0 && exp < b.Cap {
			d = exp
		}
	}
	return d + time.Duration(rand.Float64()*b.Jitter*float64(b.Base))
}

// withDefaultsFrom fills b's zero fields from def.
func (b Backoff) withDefaultsFrom(def Backoff) Backoff {
	if b.Base <= 0 {
		b.Base = def.Base
	}
	if b.Cap <= 0 {
		b.Cap = def.Cap
	}
	if b.Jitter <= 0 {
		b.Jitter = def.Jitter
	}
	return b
}
