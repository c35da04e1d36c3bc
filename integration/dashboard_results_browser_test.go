package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/worker"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// An operator watching a running task in the dashboard sees its progress
// bar, then, without reloading, the task succeed and its result.
func TestDashboardShowsResultAndProgressInBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	dashAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dev := startDev(t, "--workers", "0", "--dashboard", dashAddr)
	release := make(chan struct{})
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("crunch", func(ctx context.Context, task *worker.Task) error {
		if err := task.Progress(ctx, 40, "crunching"); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		task.SetResult([]byte("done: 42"))
		return nil
	}, nil))
	ctx := context.Background()
	w, err := worker.New(ctx, dev.js, &worker.Config{Registry: reg, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	client, err := ax.NewClient(ctx, dev.js, nil)
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	const id = "crunch-1"
	_, err = client.Submit(ctx, ax.TaskSpec{ID: id, Type: "crunch", Tenant: "acme"})
	require.NoError(t, err)

	bctx := browserContext(t, ctx, browser)
	dir := artifactsDir(t)
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, target *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.FullScreenshot(100)(ctx, target)
			if err != nil {
				return chromedp.Void{}, err
			}
			path := filepath.Join(dir, name)
			t.Logf("screenshot: %s", path)
			return chromedp.Void{}, os.WriteFile(path, png, 0o644)
		}
	}
	defer func() {
		if t.Failed() {
			var text string
			_ = chromedp.Do(bctx, shot("dashboard-results-failure.png"), into(chromedp.Text(`body`), &text))
			t.Logf("page at failure:\n%s", text)
		}
	}()

	var value float64
	var progress string
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate("http://"+dashAddr+"/#/task/"+id+"?tenant=acme"),
		void(chromedp.Poll[bool](`document.querySelector("#progress progress")?.value === 40`, chromedp.WithPollingTimeout(30*time.Second))),
		into(chromedp.Evaluate[float64](`document.querySelector("#progress progress").value`), &value),
		into(chromedp.Evaluate[string](`document.querySelector("#progress")?.textContent ?? ""`), &progress),
		shot("dashboard-task-progress.png"),
	))
	require.Equal(t, 40.0, value)
	require.Contains(t, progress, "40% crunching")

	close(release)
	var result string
	require.NoError(t, chromedp.Do(bctx,
		// The page reads a running task again every second: no reload.
		void(chromedp.Poll[bool](`document.querySelector('[data-field="state"]')?.textContent === "SUCCEEDED"`,
			chromedp.WithPollingTimeout(30*time.Second))),
		into(chromedp.Evaluate[string](`document.querySelector("#result")?.textContent ?? ""`), &result),
		shot("dashboard-task-result.png"),
	))
	require.Equal(t, "done: 42", result)
}
