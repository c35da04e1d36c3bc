package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Level is a bucket's backpressure level ([control.Level]).
type Level = control.Level

// Backpressure levels, in increasing order.
const (
	LevelOK     = control.LevelOK     // below the alert threshold
	LevelAlert  = control.LevelAlert  // alert: log line, event, metric
	LevelRefuse = control.LevelRefuse // the server refuses non-core tasks (see [BucketPressure.Refusing])
	LevelPause  = control.LevelPause  // P3 and P4 dispatch paused
)

// BucketPressure is the depth of one priority bucket ([control.BucketPressure]).
type BucketPressure = control.BucketPressure

// Pressure is the backpressure report the leader publishes in AX_CONTROL
// under [control.PressureKey] and clients watch ([control.Pressure]).
type Pressure = control.Pressure

// PressureThresholds are the backpressure thresholds, as fractions of a
// bucket's capacity ([control.PressureThresholds]).
type PressureThresholds = control.PressureThresholds

// DefaultPressureThresholds returns the wire contract's thresholds (docs/WIRE.md): alert at 60 %,
// refuse at 80 %, pause at 95 %, resume below 40 %.
func DefaultPressureThresholds() PressureThresholds { return control.DefaultPressureThresholds() }

// pressureWatch keeps the client's view of the pressure report, from a
// subscription to the report's KV subject (no goroutine of ours: the
// connection delivers) and one initial read.
type pressureWatch struct {
	sub *nats.Subscription
}

// watchPressure subscribes to the pressure key, then reads it once. A
// publish-only client, which may not read the control bucket, subscribes
// to the reports the leader publishes on ax.events.pressure while a bucket
// is at the alert level or above (each valid for its ValidFor: once they
// stop, the last one lapses).
func (c *Client) watchPressure(ctx context.Context) error {
	subject := kv.KeySubject(c.cfg.Names.ControlBucket(), control.PressureKey)
	if c.cfg.PublishOnly {
		subject = c.cfg.Names.EventSubject("pressure")
	}
	sub, err := c.js.Conn().Subscribe(subject, func(msg *nats.Msg) { c.setPressure(msg.Data) })
	if err != nil {
		return fmt.Errorf("watch %s: %w", subject, err)
	}
	c.watch.sub = sub
	if c.cfg.PublishOnly {
		return nil
	}
	bucket, err := control.Open(ctx, c.js, c.cfg.Names)
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("watch pressure: bind %s: %w", c.cfg.Names.ControlBucket(), err)
	}
	entry, err := bucket.Get(ctx, control.PressureKey)
	switch {
	case err == nil:
		c.setPressure(entry.Value())
	case errors.Is(err, jetstream.ErrKeyNotFound):
	default:
		c.cfg.Logger.Warn("read_pressure_failed", zap.Error(err))
	}
	return nil
}

// setPressure keeps the newer of the current and the received report.
func (c *Client) setPressure(data []byte) {
	var p Pressure
	if len(data) == 0 || json.Unmarshal(data, &p) != nil {
		return
	}
	for {
		cur := c.pressure.Load()
		if cur != nil && cur.UpdatedAt.After(p.UpdatedAt) {
			return
		}
		if c.pressure.CompareAndSwap(cur, &p) {
			for i := range c.sent { // the new report counts what was sent before it
				c.sent[i].Store(0)
			}
			return
		}
	}
}

// Pressure returns the last backpressure report the client saw, or nil.
func (c *Client) Pressure() *Pressure { return c.pressure.Load() }

// admit refuses a non-core task whose bucket is at the refuse level. A
// delayed task enters its bucket only when released, so the delayed tasks
// waiting in AX_DELAYED (of every priority: their schedules do not name
// one) count toward its bucket's capacity: otherwise any number of them
// would be accepted and then released into a full bucket.
func (c *Client) admit(t TaskSpec, now time.Time) error {
	p := c.pressure.Load()
	if t.Core || p == nil || now.After(p.UpdatedAt.Add(p.ValidFor)) {
		return nil
	}
	for _, b := range p.Buckets {
		if b.Priority != level(t.Priority) {
			continue
		}
		// A refusing bucket's level is raised to the refuse level until it
		// is below the alert level: say so, not that it is above 80%.
		if b.Refusing {
			return fmt.Errorf("submit task %s: %w: bucket %s refuses non-core tasks until it is below %.0f%% (now %.0f%%, %d of %d)",
				t.ID, ErrOverloaded, b.Stream, 100*p.Thresholds.Alert, 100*b.Depth, b.Msgs, b.Capacity)
		}
		if b.Level >= LevelRefuse {
			return fmt.Errorf("submit task %s: %w: bucket %s is %.0f%% full (%d of %d), at or above %.0f%%: only core tasks are accepted",
				t.ID, ErrOverloaded, b.Stream, 100*b.Depth, b.Msgs, b.Capacity, 100*p.Thresholds.Refuse)
		}
		// What this client stored since the report counts too (a burst
		// would otherwise overshoot by a report interval's worth).
		if sent := uint64(max(c.sent[level(t.Priority)].Load(), 0)); b.Capacity > 0 && sent > 0 {
			if depth := float64(b.Msgs+sent) / float64(b.Capacity); depth >= p.Thresholds.Refuse {
				return fmt.Errorf("submit task %s: %w: bucket %s holds about %d of %d (%d at the last report, %d sent since): %.0f%%, at or above %.0f%%: only core tasks are accepted",
					t.ID, ErrOverloaded, b.Stream, b.Msgs+sent, b.Capacity, b.Msgs, sent, 100*depth, 100*p.Thresholds.Refuse)
			}
		}
		if !t.RunAt.IsZero() && b.Capacity > 0 {
			if depth := float64(b.Msgs+p.Delayed) / float64(b.Capacity); depth >= p.Thresholds.Refuse {
				return fmt.Errorf("submit delayed task %s: %w: bucket %s holds %d and %d delayed tasks wait to be released: %.0f%% of its capacity %d, at or above %.0f%%: only core tasks are accepted",
					t.ID, ErrOverloaded, b.Stream, b.Msgs, p.Delayed, 100*depth, b.Capacity, 100*p.Thresholds.Refuse)
			}
		}
	}
	return nil
}

// Close stops watching the pressure report. The client must not be used after.
func (c *Client) Close() error {
	if c.watch.sub == nil {
		return nil
	}
	return c.watch.sub.Unsubscribe()
}
