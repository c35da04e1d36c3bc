package ax

import "github.com/ax-mesh/ax/axtype"

// Priority names a task's priority bucket: [P0] (highest) to [P4] (lowest),
// written as on the wire ("p0".."p4"); the zero value is [DefaultPriority].
// It is [axtype.Priority].
type Priority = axtype.Priority

// The priorities, highest first.
const (
	P0 = axtype.P0
	P1 = axtype.P1
	P2 = axtype.P2
	P3 = axtype.P3
	P4 = axtype.P4
)

// DefaultPriority is the priority of a task that names none (the zero
// [Priority]), in the Go API and the CLI alike.
const DefaultPriority = axtype.DefaultPriority

// PriorityOf returns the priority of bucket level (0..4).
func PriorityOf(level int) Priority { return axtype.PriorityOf(level) }

// level returns the bucket of a validated priority.
func level(p Priority) int {
	level, _ := p.Level()
	return level
}
