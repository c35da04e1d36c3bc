package ax_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/stretchr/testify/require"
)

// TestTaskJSONKeys: a Task encodes with snake_case keys and decodes back
// to itself.
func TestTaskJSONKeys(t *testing.T) {
	t.Parallel()
	task := ax.TaskSpec{ID: "a", Type: "report", Payload: []byte("p"), Priority: ax.P2, Tenant: "acme", Key: "k",
		Timeout: time.Second, MaxAttempts: 3, Core: true, Deadline: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		Headers: map[string]string{"Ax-Trace": "t"}, RunAt: time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC), Delay: time.Minute}
	data, err := json.Marshal(task)
	require.NoError(t, err)
	var keys map[string]any
	require.NoError(t, json.Unmarshal(data, &keys))
	for _, k := range []string{"id", "type", "payload", "priority", "tenant", "key", "timeout", "max_attempts", "core", "deadline", "headers", "run_at", "delay"} {
		require.Contains(t, keys, k)
	}
	var back ax.TaskSpec
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, task, back)
}
