package control

import (
	"cmp"
	"fmt"
	"time"
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
	// leave streams.TaskRoom below it (see ax's Client.Submit).
	MaxMsgSize int32 `json:"max_msg_size,omitempty"`
}

// Pressure is the backpressure report the leader publishes in AX_CONTROL
// under [PressureKey] and clients watch.
type Pressure struct {
	Buckets []BucketPressure `json:"buckets"`
	// Paused is true while the dispatch of any bucket is paused;
	// PausedPriorities names them (3, 4 or both): a bucket is paused only
	// while a bucket of higher priority is full, never for its own depth.
	Paused           bool  `json:"paused"`
	PausedPriorities []int `json:"paused_priorities,omitempty"`
	// Delayed is the messages in AX_DELAYED (schedules and fired ones):
	// delayed tasks not yet in a bucket. A delayed submit counts them
	// toward its bucket's capacity (see ax's Client.Submit).
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
