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

// TestTaskInfoJSONKeys: what `ax submit --json` prints has snake_case keys,
// and no run_at (no "0001-01-01…") for a task that runs at once;
// unique_skipped only when set.
func TestTaskInfoJSONKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		info ax.TaskInfo
		want []string
	}{
		{"at once", ax.TaskInfo{ID: "a", Type: "echo", Tenant: "acme", Priority: ax.P2, Shard: 3, Stream: "AX_P2", Sequence: 7},
			[]string{"id", "type", "tenant", "priority", "shard", "stream", "sequence", "duplicate"}},
		{"delayed", ax.TaskInfo{ID: "a", Type: "echo", Tenant: "acme", Stream: "AX_DELAYED", Sequence: 7, RunAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
			[]string{"id", "type", "tenant", "priority", "shard", "stream", "sequence", "run_at", "duplicate"}},
		{"unique skipped", ax.TaskInfo{ID: "a", Type: "echo", Tenant: "acme", Stream: "AX_P2", Duplicate: true, UniqueSkipped: true},
			[]string{"id", "type", "tenant", "priority", "shard", "stream", "sequence", "duplicate", "unique_skipped"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			data, err := json.Marshal(c.info)
			require.NoError(t, err)
			require.NotContains(t, string(data), "0001-01-01")
			var keys map[string]any
			require.NoError(t, json.Unmarshal(data, &keys))
			got := make([]string, 0, len(keys))
			for k := range keys {
				got = append(got, k)
			}
			require.ElementsMatch(t, c.want, got, string(data))
		})
	}
}
