package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// logEntry is one entry of an ax process's log: its time, message and
// fields, from either form `--log-format` gives (a console line:
// time, level, logger, caller, message and the fields as JSON, separated
// by tabs; or a JSON object per line).
type logEntry struct {
	TS     time.Time
	Msg    string
	Fields map[string]any
}

// field returns a string field of the entry, "" if absent.
func (e logEntry) field(name string) string {
	s, _ := e.Fields[name].(string)
	return s
}

// logEntries parses the log lines of output; other lines are skipped.
func logEntries(output string) []logEntry {
	var out []logEntry
	for line := range strings.Lines(output) {
		if e, ok := parseLogLine(strings.TrimRight(line, "\r\n")); ok {
			out = append(out, e)
		}
	}
	return out
}

func parseLogLine(line string) (logEntry, bool) {
	if strings.HasPrefix(line, "{") {
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) != nil {
			return logEntry{}, false
		}
		e := logEntry{Fields: fields}
		e.Msg, _ = fields["msg"].(string)
		if ts, ok := fields["ts"].(string); ok {
			e.TS, _ = time.Parse(time.RFC3339Nano, ts)
		}
		return e, e.Msg != ""
	}
	parts := strings.Split(line, "\t")
	if len(parts) < 4 {
		return logEntry{}, false
	}
	ts, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return logEntry{}, false
	}
	e := logEntry{TS: ts, Fields: map[string]any{}}
	rest := parts[3:] // after time, level and logger: the caller (if any), the message, the fields
	if len(rest) > 1 && strings.Contains(rest[0], ".go:") {
		rest = rest[1:]
	}
	e.Msg = rest[0]
	if len(rest) > 1 && strings.HasPrefix(rest[len(rest)-1], "{") {
		if json.Unmarshal([]byte(rest[len(rest)-1]), &e.Fields) != nil {
			return logEntry{}, false
		}
	}
	return e, true
}

// Both forms of a log line give the same entry (the journal's
// final_write_failed and the partition test's lost_claim are read from
// the workers' console lines since ax logs them by default: read as JSON
// alone, a failed outcome write went unseen and its task's second run was
// counted unexplained).
func TestLogLinesParse(t *testing.T) {
	t.Parallel()
	console := "2026-12-07T11:52:07.230Z\tERROR\tworker\tworker/outcome.go:202\tfinal_write_failed\t" +
		`{"worker": "w1", "task_id": "t1", "error": "context deadline exceeded"}` + "\n"
	plain := "2026-12-07T11:52:07.230Z\tINFO\tworker\tworker_started\n"
	jsonLine := `{"level":"error","ts":"2026-12-07T11:52:07.230Z","logger":"worker","msg":"final_write_failed","task_id":"t1"}` + "\n"
	entries := logEntries(console + "worker w1 joining the mesh\n" + plain + jsonLine)
	require.Len(t, entries, 3)
	at := time.Date(2026, 12, 7, 11, 52, 7, 230e6, time.UTC)
	for _, i := range []int{0, 2} {
		require.Equal(t, "final_write_failed", entries[i].Msg)
		require.Equal(t, "t1", entries[i].field("task_id"))
		require.True(t, entries[i].TS.Equal(at))
	}
	require.Equal(t, "worker_started", entries[1].Msg)
}
