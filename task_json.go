package ax

import (
	"encoding/json"
	"time"
)

// UnmarshalJSON reads a [TaskSpec] in its JSON form, and also in the form of
// records written before Task had JSON tags (Go field names as keys): a
// cron job stored then keeps its MaxAttempts and RunAt. The other old keys
// match the new ones case-insensitively, as encoding/json does.
func (t *TaskSpec) UnmarshalJSON(data []byte) error {
	type plain TaskSpec // no methods: no recursion
	var legacy struct {
		MaxAttempts *int       `json:"MaxAttempts"`
		RunAt       *time.Time `json:"RunAt"`
	}
	if err := json.Unmarshal(data, (*plain)(t)); err != nil {
		return err
	}
	if err := json.Unmarshal(data, &legacy); err != nil {
		return err
	}
	if legacy.MaxAttempts != nil && t.MaxAttempts == 0 {
		t.MaxAttempts = *legacy.MaxAttempts
	}
	if legacy.RunAt != nil && t.RunAt.IsZero() {
		t.RunAt = *legacy.RunAt
	}
	return nil
}
