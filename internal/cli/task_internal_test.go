package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// ax task get says why a PENDING task waits aside and what brings it
// back, and says nothing of the kind for a delayed task.
func TestTaskGetSaysWhyATaskWaitsAside(t *testing.T) {
	at := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	record := func(trail ...kv.Move) *kv.Record {
		return &kv.Record{ID: "t1", Tenant: "acme", Type: "charge", State: kv.StatePending, RunAt: &at, CreatedAt: at, UpdatedAt: at, Trail: trail}
	}
	born := kv.Move{To: kv.StateReady, Action: "submit", At: at}
	cases := []struct {
		name string
		rec  *kv.Record
		want string // "" for no Waiting line
	}{
		{"held back by a limit", record(born, kv.Move{From: kv.StateReady, To: kv.StatePending, Action: kv.ActionSteppedAside, At: at}),
			"a READY task held back by a concurrency or rate limit; READY again at its run time"},
		{"a retry held back by a limit", record(born,
			kv.Move{From: kv.StateReady, To: kv.StateRunning, Action: "claim", At: at},
			kv.Move{From: kv.StateRunning, To: kv.StateRetrying, Action: "retry", At: at},
			kv.Move{From: kv.StateRetrying, To: kv.StatePending, Action: kv.ActionSteppedAside, At: at}),
			"a retry (its backoff over) held back by a concurrency or rate limit"},
		{"paused aside, then paused and resumed by an operator", record(born,
			kv.Move{From: kv.StateReady, To: kv.StatePending, Action: kv.ActionPausedAside, At: at},
			kv.Move{From: kv.StatePending, To: kv.StatePaused, Action: "pause", At: at},
			kv.Move{From: kv.StatePaused, To: kv.StatePending, Action: "resume", At: at}),
			"a READY task whose type or tenant is paused; READY again once the pause ends"},
		{"delayed", record(kv.Move{To: kv.StatePending, Action: "submit", At: at}), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			printRecord(&out, c.rec)
			if c.want == "" {
				require.NotContains(t, out.String(), "Waiting")
				return
			}
			require.Regexp(t, `State\s+PENDING\nWaiting\s+aside in AX_DELAYED: `, out.String())
			require.Contains(t, out.String(), c.want)
		})
	}
}
