package ax

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ax-mesh/ax/streams"
)

// Priority names a task's priority bucket: [P0] (highest) to [P4] (lowest),
// written as on the wire ("p0".."p4"). The zero value means
// [DefaultPriority], so a Task that names none is not urgent: aging lifts
// waiting tasks toward P0 and backpressure pauses P3 and P4, which assumes
// most traffic sits in between. A string, not a number, so that no integer
// silently changes meaning.
type Priority string

// The priorities, highest first.
const (
	P0 Priority = "p0"
	P1 Priority = "p1"
	P2 Priority = "p2"
	P3 Priority = "p3"
	P4 Priority = "p4"
)

// DefaultPriority is the priority of a task that names none (the zero
// [Priority]), in the Go API and the CLI alike.
const DefaultPriority = P2

// PriorityOf returns the priority of bucket level (0..4).
func PriorityOf(level int) Priority { return Priority("p" + strconv.Itoa(level)) }

// Level returns the bucket of p: 0 (P0) to 4 (P4); the zero Priority is
// [DefaultPriority]'s. Any other value is an error.
func (p Priority) Level() (int, error) {
	if p == "" {
		p = DefaultPriority
	}
	level, err := streams.ParsePriority(string(p))
	if err != nil {
		return 0, fmt.Errorf("priority: %w", err)
	}
	return level, nil
}

// level returns the bucket of a validated priority.
func (p Priority) level() int {
	level, _ := p.Level()
	return level
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
