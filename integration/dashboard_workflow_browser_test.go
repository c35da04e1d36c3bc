package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// An operator opens the workflows page of a live ax dev in headless
// Chromium and a real workflow's page while a task runs, sees the page
// follow it to SUCCEEDED without a reload, then its graph (a box per
// task, an arrow per edge; two tasks done, one DEAD, one waiting on it)
// and its layers with each task's state, and follows a task's link to its
// page.
// A workflow id belongs to its tenant as a task id does: without a tenant
// the API answers the one tenant's, and 409 naming them when two have it.
func TestDashboardWorkflowInBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	dashAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dev := startDev(t, "--workers", "0", "--dashboard", dashAddr)
	reg := worker.NewRegistry()
	shipping := make(chan struct{}) // ship runs until it is closed
	require.NoError(t, reg.Handle("charge", func(context.Context, *worker.Task) error { return nil }, nil))
	require.NoError(t, reg.Handle("ship", func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-shipping:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil))
	require.NoError(t, reg.Handle("mail", func(context.Context, *worker.Task) error {
		return worker.Permanent(errors.New("mail server down"))
	}, nil))
	ctx := context.Background()
	w, err := worker.New(ctx, dev.js, &worker.Config{Registry: reg, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	client, err := ax.NewClient(ctx, dev.js, nil)
	require.NoError(t, err)

	wf := &ax.Workflow{ID: "order-9", Tenant: "acme"}
	wf.Add("charge", ax.TaskSpec{Type: "charge"})
	wf.Add("ship", ax.TaskSpec{Type: "ship"}, "charge")
	wf.Add("mail", ax.TaskSpec{Type: "mail"}, "charge")
	wf.Add("done", ax.TaskSpec{Type: "ship"}, "ship", "mail")
	_, err = client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	for id, state := range map[string]kv.State{"order-9/ship": kv.StateRunning, "order-9/mail": kv.StateDead} {
		require.Eventually(t, func() bool {
			rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: "acme", ID: id})
			return err == nil && rec.State == state
		}, 30*time.Second, 50*time.Millisecond, "%s %s", id, state)
	}

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + dashAddr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/api/workflows/order-9")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"tenant":"acme"`, "the one tenant's workflow")

	bctx := browserContext(t, ctx, browser)
	defer func() {
		if t.Failed() {
			var text string
			_ = chromedp.Do(bctx, into(chromedp.Text(`body`), &text))
			t.Logf("page at failure:\n%s", text)
		}
	}()
	var row, running, layers, trail, record string
	var boxes, edges int
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate("http://"+dashAddr+"/"),
		chromedp.Click(`nav a[data-page="workflows"]`),
		chromedp.WaitVisible(`#workflows a[data-workflow-link="order-9"]`),
		into(chromedp.Text(`#workflows tr[data-workflow="order-9"]`), &row),
		chromedp.Click(`#workflows a[data-workflow-link="order-9"]`),
		chromedp.WaitVisible(`#workflow-tasks tr[data-node="ship"]`),
		into(chromedp.Evaluate[string](`document.querySelector('#workflow-tasks tr[data-node="ship"]').innerText`), &running),
	))
	require.Regexp(t, `order-9\s+acme\s+RUNNING\s+4\s`, row)
	require.Contains(t, running, "RUNNING")
	// The page of a running workflow follows it without a reload.
	close(shipping)
	require.NoError(t, chromedp.Do(bctx,
		void(chromedp.Poll[bool](`/SUCCEEDED/.test(document.querySelector('#workflow-tasks tr[data-node="ship"]')?.innerText ?? "")`, chromedp.WithPollingTimeout(30*time.Second))),
		chromedp.WaitVisible(`#workflow-graph`),
		into(chromedp.Evaluate[int](`document.querySelectorAll("#workflow-graph a[data-node]").length`), &boxes),
		into(chromedp.Evaluate[int](`document.querySelectorAll("#workflow-graph line[data-edge]").length`), &edges),
		into(chromedp.Evaluate[string](`document.querySelector("#workflow-tasks").innerText`), &layers),
		chromedp.Click(`#workflow-tasks a[data-task-link="order-9/mail"]`),
		chromedp.WaitVisible(`#trail`),
		into(chromedp.Text(`#trail`), &trail),
		into(chromedp.Text(`#record`), &record),
	))
	require.Equal(t, 4, boxes, "a box per task")
	require.Equal(t, 4, edges, "an arrow per edge")
	for _, want := range []string{`0\s+charge\s+SUCCEEDED\s+charge`, `1\s+ship\s+SUCCEEDED\s+ship\s+charge`,
		`1\s+mail\s+DEAD\s+mail\s+charge\s+permanent: mail server down`, `2\s+done\s+WAITING\s+ship\s+ship, mail\s+mail`} {
		require.Regexp(t, want, layers)
	}
	require.Contains(t, record, "order-9/mail")
	require.Contains(t, trail, "mail server down")

	// Another tenant's workflow of the same id: the id alone is ambiguous.
	other := &ax.Workflow{ID: "order-9", Tenant: "globex"}
	other.Add("charge", ax.TaskSpec{Type: "charge"})
	_, err = client.SubmitWorkflow(ctx, other)
	require.NoError(t, err)
	code, body = get("/api/workflows/order-9")
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "workflows of 2 tenants have it (acme, globex)")
	code, body = get("/api/workflows/order-9?tenant=globex")
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.Contains(body, `"tenant":"globex"`), body)
}
