package axtype

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Priority names a task's priority bucket: [P0] (highest) to [P4] (lowest),
// written as on the wire ("p0".."p4"); [Priority.Level] is its bucket
// number (0..4), [PriorityOf] the priority of a number. The zero value
// means [DefaultPriority], so a task that names none is not urgent: aging
// lifts waiting tasks toward P0 and backpressure pauses P3 and P4, which
// assumes most traffic sits in between. A string, not a number, so that no
// integer silently changes meaning.
type Priority string

// The priorities, highest first.
const (
	P0 Priority = "p0"
	P1 Priority = "p1"
	P2 Priority = "p2"
	P3 Priority = "p3"
	P4 Priority = "p4"
)

// Priorities is the number of priority buckets, P0 to P4.
const Priorities = 5

// DefaultPriority is the priority of a task that names none (the zero
// [Priority]), in the Go API and the CLI alike.
const DefaultPriority = P2

// ErrBadPriority means a priority is not p0..p4.
var ErrBadPriority = errors.New("bad priority")

// PriorityOf returns the priority of bucket level (0..4).
func PriorityOf(level int) Priority { return Priority("p" + strconv.Itoa(level)) }

// ParsePriority parses "p0".."p4" into its bucket number; anything else,
// the empty string included, is an error matching [ErrBadPriority].
func ParsePriority(token string) (int, error) {
	if len(token) != 2 || token[0] != 'p' || token[1] < '0' || token[1] >= '0'+Priorities {
		return 0, fmt.Errorf("%w: %q (want p0..p%d)", ErrBadPriority, token, Priorities-1)
	}
	return int(token[1] - '0'), nil
}

// Level returns the bucket of p: 0 (P0) to 4 (P4); the zero Priority is
// [DefaultPriority]'s. Any other value is an error.
func (p Priority) Level() (int, error) {
	if p == "" {
		p = DefaultPriority
	}
	level, err := ParsePriority(string(p))
	if err != nil {
		return 0, fmt.Errorf("priority: %w", err)
	}
	return level, nil
}

// UnmarshalJSON reads "p0".."p4", or a number 0..4 as cron jobs stored
// before Priority was named stored it (0 was P0 then: it stays P0).
func (p *Priority) UnmarshalJSON(data []byte) error {
	var level int
	if err := json.Unmarshal(data, &level); err == nil {
		*p = PriorityOf(level)
		return nil
	}
	var name string
	if err := json.Unmarshal(data, &name); err != nil {
		return fmt.Errorf("priority: want \"p0\"..\"p4\": %w", err)
	}
	*p = Priority(name)
	return nil
}
