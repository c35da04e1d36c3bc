package dashboard_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/dashboard"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// do sends method path to the bundle's server with the given Host and
// headers and returns the status.
func (b *testBundle) do(t *testing.T, method, path, host, body string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	return res.StatusCode
}

// A page of another site whose name was rebound to the dashboard's address
// (DNS rebinding) sends its own name as Host, and its Origin matches that
// Host: it is refused (421) before reading anything or acting, even with
// actions allowed; the loopback names and the names added pass.
func TestHostAllowList(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{AllowActions: true, AllowedHosts: []string{"ax.internal.example"}})
	id := b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme"})
	port := b.srv.Listener.Addr().(*net.TCPAddr).Port
	rebound := "attacker.example:" + strconv.Itoa(port)
	action := map[string]string{"Content-Type": "application/json", "X-Ax-Confirm": "yes",
		"Origin": "http://" + rebound, "X-Ax-Token": b.dash.ActionToken()}

	require.Equal(t, http.StatusMisdirectedRequest, b.do(t, http.MethodGet, "/api/overview", rebound, "", nil))
	require.Equal(t, http.StatusMisdirectedRequest, b.do(t, http.MethodGet, "/", rebound, "", nil))
	require.Equal(t, http.StatusMisdirectedRequest,
		b.do(t, http.MethodPost, "/api/actions/task.cancel", rebound, `{"id":"`+id+`"}`, action))
	require.Equal(t, kv.StateReady, b.Get(t, id).State, "the rebound page cancelled nothing")

	for _, host := range []string{"127.0.0.1:" + strconv.Itoa(port), "localhost:" + strconv.Itoa(port), "[::1]:" + strconv.Itoa(port), "ax.internal.example", "AX.internal.example:443"} {
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/api/workers", host, "", nil), host)
	}
}

// Serve allows the host it listens on, and with actions allowed without a
// token it makes one of 128 bits; read-only dashboards have none.
func TestServeAllowsItsListenHostAndMakesAToken(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	require.Empty(t, b.dash.ActionToken())
	d, err := dashboard.New(&dashboard.Config{Conn: b.NC, AllowActions: true, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.Len(t, d.ActionToken(), 32)
	given, err := dashboard.New(&dashboard.Config{Conn: b.NC, AllowActions: true, ActionToken: "given-token", Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.Equal(t, "given-token", given.ActionToken())

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, "127.0.0.2:0", func(a net.Addr) { ready <- a }) }()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Skipf("cannot listen on 127.0.0.2 here: %v", err)
	}
	u := url.URL{Scheme: "http", Host: addr.String(), Path: "/api/workers"}
	res, err := http.Get(u.String())
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}
