package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `ax dashboard` connects with the CLI's flags to a running ax and serves
// the page read-only: the overview has the buckets, actions answer 403.
func TestDashboardCommandReadOnly(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	id := strings.TrimSpace(runAx(t, "submit", "fail", "--server", dev.url))
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startAx(t, "dashboard", "--listen", addr, "--server", dev.url) // the deprecated name of --addr still works
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "dashboard on http://"+addr) }, 30*time.Second, 50*time.Millisecond,
		"ax dashboard did not start:\n%s", p.output())
	require.Contains(t, p.output(), "read-only")

	res, err := http.Get("http://" + addr + "/api/overview")
	require.NoError(t, err)
	var ov struct {
		AllowActions bool `json:"allow_actions"`
		Stats        struct {
			Buckets []struct{ Stream string } `json:"buckets"`
		} `json:"stats"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&ov))
	res.Body.Close()
	require.False(t, ov.AllowActions)
	require.Len(t, ov.Stats.Buckets, 5)
	require.Equal(t, "AX_P0", ov.Stats.Buckets[0].Stream)

	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/actions/task.cancel", strings.NewReader(`{"id":"`+id+`"}`))
	require.NoError(t, err)
	req.Header.Set("X-Ax-Confirm", "yes")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Contains(t, string(body), "--allow-actions")
}

// `ax dashboard --allow-actions` prints the URL with its action token; an
// action without the token is refused, one with it runs, and a request
// naming another host (a DNS-rebound page) is refused.
func TestDashboardCommandActionToken(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	id := strings.TrimSpace(runAx(t, "submit", "block", "--server", dev.url, "--run-at", time.Now().Add(time.Hour).Format(time.RFC3339)))
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startAx(t, "dashboard", "--addr", addr, "--server", dev.url, "--allow-actions")
	prefix := "open http://" + addr + "/#token="
	require.Eventually(t, func() bool { return strings.Contains(p.output(), prefix) }, 30*time.Second, 50*time.Millisecond,
		"ax dashboard did not print its token:\n%s", p.output())
	out := p.output()
	token := out[strings.Index(out, prefix)+len(prefix):]
	token = token[:strings.IndexAny(token, " \n")]
	require.Len(t, token, 32)

	cancel := func(host, token string) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/actions/task.cancel", strings.NewReader(`{"id":"`+id+`"}`))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("X-Ax-Confirm", "yes")
		req.Header.Set("X-Ax-Token", token)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusForbidden, cancel(addr, ""))
	require.Equal(t, http.StatusForbidden, cancel(addr, strings.Repeat("0", 32)))
	require.Equal(t, http.StatusMisdirectedRequest, cancel("rebound.example"+addr[strings.LastIndex(addr, ":"):], token))
	require.Equal(t, http.StatusOK, cancel(addr, token))
}
