package metrics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// The limits and pauses, their use, and the deliveries held back by them
// show in the metrics.
func TestLimitsMetrics(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	control, err := js.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	data, err := json.Marshal(kv.Limits{
		Limits: map[string]kv.Limit{"partner": {Concurrency: 10}, "tenant:acme": {Rate: 50, Burst: 5, Weight: 2}},
		Paused: map[string]kv.Pause{"report": {At: time.Now()}},
	})
	require.NoError(t, err)
	_, err = control.Put(ctx, kv.LimitsKey, data)
	require.NoError(t, err)
	use, err := kv.NewLimitUse(ctx, js, streams.Names{})
	require.NoError(t, err)
	for _, h := range []string{"w/1", "w/2"} {
		ok, err := use.Acquire(ctx, "partner", 10, h, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
	}
	m := metrics.New(&metrics.Config{JetStream: js})
	var hold worker.HoldObserver = m
	hold.TaskHeldBack("partner", "acme", worker.HeldLimited)
	hold.TaskHeldBack("report", "acme", worker.HeldPaused)
	hold.TaskHeldBack("report", "acme", worker.HeldPaused)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`ax_limit_concurrency{target="partner"} 10`,
		`ax_limit_in_use{target="partner"} 2`,
		`ax_limit_rate{target="tenant:acme"} 50`,
		`ax_limit_tokens{target="tenant:acme"} 5`,
		`ax_limit_weight{target="tenant:acme"} 2`,
		`ax_paused{target="report"} 1`,
		`ax_tasks_held_back_total{reason="limited",tenant="acme",type="partner"} 1`,
		`ax_tasks_held_back_total{reason="paused",tenant="acme",type="report"} 2`,
	} {
		require.True(t, strings.Contains(text, want+"\n"), "missing %q in:\n%s", want, text)
	}
}
