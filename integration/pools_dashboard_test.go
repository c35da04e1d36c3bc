package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// On a pools deployment the dashboard lists the unserved types on its
// overview, with the deadline an operator set, and groups the workers by type on the workers page.
func TestPoolsDashboardInBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	dashAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dev := startDev(t, "--pools", "--workers", "0", "--dashboard", dashAddr)
	ctx := context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("email", func(context.Context, *worker.Task) error { return nil }, nil))
	w, err := worker.New(ctx, dev.js, &worker.Config{ID: "mailer", Registry: reg, Concurrency: 4, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	client, err := ax.NewClient(ctx, dev.js, nil)
	require.NoError(t, err)
	for i := range 3 {
		_, err := client.Submit(ctx, ax.TaskSpec{Type: "report", Tenant: "acme", Priority: ax.PriorityOf(i)})
		require.NoError(t, err)
	}
	_, err = admin.NewClient(dev.js.Conn(), streams.Names{}).SetUnservedDeadline(ctx, "report", time.Hour)
	require.NoError(t, err)

	bctx := browserContext(t, ctx, browser)
	var unserved, pool string
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate("http://"+dashAddr+"/"),
		// The overview is redrawn every second: a row read between two
		// redraws reads empty (seen in CI). Wait for the row's text and
		// read it in one evaluation.
		void(chromedp.Poll[bool](`/^report\s+3\s.*1h0m0s unserved$/.test(document.querySelector('#unserved tr[data-type="report"]')?.innerText ?? "")`, chromedp.WithPollingTimeout(30*time.Second))),
		into(chromedp.Evaluate[string](`document.querySelector('#unserved tr[data-type="report"]')?.innerText ?? ""`), &unserved),
		chromedp.Click(`nav a[data-page="workers"]`),
		chromedp.WaitVisible(`#pools tr[data-type="email"]`),
		into(chromedp.Text(`#pools tr[data-type="email"]`), &pool),
	))
	require.Regexp(t, `^report\s+3\s.*1h0m0s unserved$`, unserved, "its depth and its deadline")
	require.Regexp(t, `^email\s+mailer\s+email\s+0\s*1\s*2`, pool, "the type's ring: its worker, pool and shards")
}
