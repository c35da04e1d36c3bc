package axtype

import "time"

// TaskInfo describes an accepted task. Its JSON form (`ax submit --json`)
// has snake_case keys, as every JSON ax prints; run_at is left out when
// the task runs at once.
type TaskInfo struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Tenant string `json:"tenant"`
	// Priority is the task's bucket, as the submitted task names it
	// ("p0".."p4" in JSON, as every priority ax prints).
	Priority Priority `json:"priority"`
	Shard    int      `json:"shard"`
	Stream   string   `json:"stream"`
	Sequence uint64   `json:"sequence"` // stream sequence of the task's message
	// RunAt is when a delayed task becomes due; zero when it runs at once.
	RunAt time.Time `json:"run_at,omitzero"`
	// Duplicate is true when the id had been submitted already within the
	// de-duplication window, or another task holds the unique key
	// (UniqueSkipped); nothing new was stored.
	Duplicate bool `json:"duplicate"`
	// UniqueSkipped is true when the submit published nothing because
	// another task holds its unique key (ax.TaskSpec.Unique), as River's
	// UniqueSkippedAsDuplicate: ID (and Stream, Sequence, Priority, Shard)
	// are that task's.
	UniqueSkipped bool `json:"unique_skipped,omitempty"`
}
