package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/dashboard"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakOptions()...)
}

type testBundle struct {
	*axtest.Bundle
	dash *dashboard.Dashboard
	srv  *httptest.Server
}

// setup runs a real server with ax provisioned, the management API, and a
// dashboard on an httptest server; no worker runs unless the test starts one.
func setup(t *testing.T, cfg dashboard.Config) *testBundle {
	t.Helper()
	b := axtest.Setup(t, axtest.Options{})
	b.StartAdmin(t, nil)
	return setupDashboardOn(t, &testBundle{Bundle: b}, cfg)
}

// get fetches path and decodes the JSON answer into out; it returns the status.
// tb is what the helpers fail through: a test, or the collector of an
// EventuallyWithT condition (which runs off the test goroutine).
type tb interface {
	require.TestingT
	Helper()
}

func (b *testBundle) get(t tb, path string, out any) int {
	t.Helper()
	res, err := http.Get(b.srv.URL + path)
	require.NoError(t, err)
	defer res.Body.Close()
	require.NoError(t, json.NewDecoder(res.Body).Decode(out), "GET %s", path)
	return res.StatusCode
}

// act posts an action as the UI does (confirmed unless headers say otherwise).
func (b *testBundle) act(t *testing.T, verb, body string, headers map[string]string, out any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/api/actions/"+verb, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Ax-Confirm", "yes")
	req.Header.Set("X-Ax-Token", b.dash.ActionToken())
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.NoError(t, json.NewDecoder(res.Body).Decode(out))
	return res.StatusCode
}

type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// The page and its assets are embedded and served with a strict CSP.
func TestStaticPages(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	for _, tc := range []struct{ path, contains, ctype string }{
		{"/", `<script src="app.js">`, "text/html"},
		{"/app.js", "EventSource", "javascript"},
		{"/app.js", "pageLimits", "javascript"},
		{"/style.css", ".timeline", "text/css"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res, err := http.Get(b.srv.URL + tc.path)
			require.NoError(t, err)
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Contains(t, string(body), tc.contains)
			require.Contains(t, res.Header.Get("Content-Type"), tc.ctype)
			require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'")
		})
	}
}

// The overview shows each bucket's depth and pressure level from the
// management API's stats, and the sampler builds the chart history.
func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Interval: 100 * time.Millisecond, Version: "9.9.9"})
	for range 3 {
		b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme", Priority: ax.P1})
	}
	var ov dashboard.Overview
	require.Equal(t, http.StatusOK, b.get(t, "/api/overview", &ov))
	require.Empty(t, ov.Error)
	require.False(t, ov.AllowActions)
	require.Equal(t, "9.9.9", ov.Version)
	require.Len(t, ov.Stats.Buckets, 5)
	require.EqualValues(t, 3, ov.Stats.Buckets[1].Depth)
	require.Equal(t, 3, ov.Stats.States[kv.StateReady])
	require.Len(t, ov.Levels, 5)
	require.Equal(t, ax.LevelOK.String(), ov.Levels[1].Level)
	require.False(t, ov.Leader, "no leader pressure report: levels from depth / capacity")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.dash.Run(ctx) }()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var ov dashboard.Overview
		b.get(c, "/api/overview", &ov)
		assert.True(c, len(ov.History) >= 3 && ov.History[len(ov.History)-1].Depth[1] == 3)
	}, 10*time.Second, 50*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// The pressure level follows the bucket's fill, with the leader's
// thresholds when its report is in the control bucket.
func TestPressureLevels(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	for range 2 {
		b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme", Priority: ax.P3})
	}
	// One in 1,000,000 is ok with the defaults; a leader's report with an
	// alert threshold below that makes it "alert".
	var ov dashboard.Overview
	b.get(t, "/api/overview", &ov)
	require.Equal(t, ax.LevelOK.String(), ov.Levels[3].Level)

	bucket, err := b.JS.KeyValue(context.Background(), "AX_CONTROL")
	require.NoError(t, err)
	_, err = bucket.Put(context.Background(), "pressure", []byte(`{"paused":true,"thresholds":{"alert":0.000001,"refuse":0.5,"pause":0.9,"resume":0.4},"updated_at":"`+
		time.Now().UTC().Format(time.RFC3339Nano)+`","valid_for":60000000000}`))
	require.NoError(t, err)
	fresh := setupDashboardOn(t, b, dashboard.Config{})
	fresh.get(t, "/api/overview", &ov)
	require.True(t, ov.Leader)
	require.True(t, ov.DispatchPaused)
	require.Equal(t, ax.LevelAlert.String(), ov.Levels[3].Level)
	require.Equal(t, ax.LevelOK.String(), ov.Levels[0].Level)

	// A bucket the server still refuses (down to the alert level) is shown
	// at the refuse level, whatever its fill.
	_, err = bucket.Put(context.Background(), "pressure", []byte(`{"buckets":[{"stream":"AX_P3","priority":3,"level":"refuse","refusing":true}],`+
		`"thresholds":{"alert":0.000001,"refuse":0.5,"pause":0.9,"resume":0.4},"updated_at":"`+
		time.Now().UTC().Format(time.RFC3339Nano)+`","valid_for":60000000000}`))
	require.NoError(t, err)
	fresh = setupDashboardOn(t, b, dashboard.Config{})
	fresh.get(t, "/api/overview", &ov)
	require.Equal(t, ax.LevelRefuse.String(), ov.Levels[3].Level, "refusing at 2 in 1,000,000")
	require.Equal(t, ax.LevelOK.String(), ov.Levels[0].Level)
}

// setupDashboardOn starts another dashboard on b's deployment.
func setupDashboardOn(t *testing.T, b *testBundle, cfg dashboard.Config) *testBundle {
	t.Helper()
	cfg.Conn, cfg.Logger = b.NC, zaptest.NewLogger(t)
	d, err := dashboard.New(&cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	out := *b
	out.dash, out.srv = d, srv
	return &out
}

// Serve streams each sample as a server-sent event, and returns when its
// context ends even while a browser holds a live stream open.
func TestServeLiveStopsWithContext(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	d, err := dashboard.New(&dashboard.Config{Conn: b.NC, Interval: 100 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, "127.0.0.1:0", func(a net.Addr) { ready <- a }) }()
	addr := <-ready

	res, err := http.Get("http://" + addr.String() + "/api/live")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	lines := bufio.NewScanner(res.Body)
	events := 0
	for events < 2 && lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			var ov dashboard.Overview
			require.NoError(t, json.Unmarshal([]byte(data), &ov))
			require.NotNil(t, ov.Sample)
			require.Len(t, ov.Sample.Depth, 5)
			events++
		}
	}
	require.Equal(t, 2, events)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return with a live stream open")
	}
}

// NATS permissions apply: a dashboard whose user may not call the
// management API answers 403 and says which subject is denied.
func TestPermissionDenied(t *testing.T) {
	t.Parallel()
	dep := axtest.Setup(t, axtest.Options{Server: natstest.Options{ConfigFile: "../docs/ax-permissions.conf"}, User: "scheduler", NoClient: true})
	dep.StartAdmin(t, nil)

	for _, tc := range []struct {
		user string
		code int
	}{{"operator", http.StatusOK}, {"service", http.StatusForbidden}} {
		t.Run(tc.user, func(t *testing.T) {
			nc, _ := dep.Server.ConnectAs(tc.user)
			d, err := dashboard.New(&dashboard.Config{Conn: nc, CallTimeout: time.Second, Logger: zaptest.NewLogger(t)})
			require.NoError(t, err)
			h := httptest.NewServer(d.Handler())
			defer h.Close()
			res, err := http.Get(h.URL + "/api/workers")
			require.NoError(t, err)
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			require.Equal(t, tc.code, res.StatusCode, string(body))
			if tc.code == http.StatusForbidden {
				require.Contains(t, string(body), "may not publish to ax.admin.workers")
			}
		})
	}
}
