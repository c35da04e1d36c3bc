package ax

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/kv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Level is a bucket's backpressure level.
type Level int

// Backpressure levels, in increasing order.
const (
	LevelOK     Level = iota // below the alert threshold
	LevelAlert               // alert: log line, event, metric
	LevelRefuse              // the server refuses non-core tasks (see [BucketPressure.Refusing])
	LevelPause               // P3 and P4 dispatch paused
)

// String names the level.
func (l Level) String() string {
	switch l {
	case LevelOK:
		return "ok"
	case LevelAlert:
		return "alert"
	case LevelRefuse:
		return "refuse"
	case LevelPause:
		return "pause"
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// MarshalText writes the level's name.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads a level's name.
func (l *Level) UnmarshalText(b []byte) error {
	for c := LevelOK; c <= LevelPause; c++ {
		if c.String() == string(b) {
			*l = c
			return nil
		}
	}
	return fmt.Errorf("unknown backpressure level %q", b)
}

// BucketPressure is the depth of one priority bucket.
type BucketPressure struct {
	Stream   string `json:"stream"`
	Priority int    `json:"priority"`
	// Msgs stored, waiting and in flight (WorkQueue keeps a message until
	// it is acked).
	Msgs     uint64  `json:"msgs"`
	Capacity int64   `json:"capacity"`
	Depth    float64 `json:"depth"` // Msgs / Capacity, 0..1
	// Level is the level in effect: that of the depth, or LevelRefuse
	// while the bucket still refuses (until it is below the alert level).
	Level Level `json:"level"`
	// Refusing is true while the bucket's stream refuses non-core tasks:
	// the leader removes its submit subject when the bucket reaches the
	// refuse level and restores it when the bucket is below the alert level
	// (streams.SetAdmission), so a producer that ignores this report is
	// refused by the server; core tasks (<prefix>.core.…) are admitted.
	Refusing bool `json:"refusing,omitempty"`
	// MaxMsgSize is the bucket's largest message (its stream's
	// MaxMsgSize; 0 when not known): a delayed task must
	// leave streams.TaskRoom below it (see [Client.Submit]).
	MaxMsgSize int32 `json:"max_msg_size,omitempty"`
}

// Pressure is the backpressure report the leader publishes in AX_CONTROL
// under [control.PressureKey] and clients watch.
type Pressure struct {
	Buckets []BucketPressure `json:"buckets"`
	// Paused is true while the dispatch of any bucket is paused;
	// PausedPriorities names them (3, 4 or both): a bucket is paused only
	// while a bucket of higher priority is full, never for its own depth.
	Paused           bool  `json:"paused"`
	PausedPriorities []int `json:"paused_priorities,omitempty"`
	// Delayed is the messages in AX_DELAYED (schedules and fired ones):
	// delayed tasks not yet in a bucket. A delayed submit counts them
	// toward its bucket's capacity (see [Client.Submit]).
	Delayed    uint64             `json:"delayed"`
	Thresholds PressureThresholds `json:"thresholds"`
	Leader     string             `json:"leader"`
	UpdatedAt  time.Time          `json:"updated_at"`
	// ValidFor is how long the report holds; a client ignores an older one
	// (the leader may be gone).
	ValidFor time.Duration `json:"valid_for"`
}

// PressureThresholds are the backpressure thresholds, as fractions of a
// bucket's capacity.
type PressureThresholds struct {
	Alert  float64 `json:"alert"`  // log, event, metric. Default 0.60
	Refuse float64 `json:"refuse"` // refuse non-core submissions. Default 0.80
	Pause  float64 `json:"pause"`  // pause P3 and P4 dispatch. Default 0.95
	Resume float64 `json:"resume"` // resume P3 and P4 below this. Default 0.40
}

// DefaultPressureThresholds returns the wire contract's thresholds (docs/WIRE.md): alert at 60 %,
// refuse at 80 %, pause at 95 %, resume below 40 %.
func DefaultPressureThresholds() PressureThresholds { return PressureThresholds{}.withDefaults() }

func (p PressureThresholds) withDefaults() PressureThresholds {
	p.Alert = cmp.Or(p.Alert, 0.60)
	p.Refuse = cmp.Or(p.Refuse, 0.80)
	p.Pause = cmp.Or(p.Pause, 0.95)
	p.Resume = cmp.Or(p.Resume, 0.40)
	return p
}

// Level returns the pressure level of a bucket at depth (stored messages
// over capacity, 0..1).
func (th PressureThresholds) Level(depth float64) Level {
	switch {
	case depth >= th.Pause:
		return LevelPause
	case depth >= th.Refuse:
		return LevelRefuse
	case depth >= th.Alert:
		return LevelAlert
	}
	return LevelOK
}

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
