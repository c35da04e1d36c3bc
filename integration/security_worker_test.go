package integration

import (
	"strings"
	"testing"
	"time"
)

// TestWorkerAsksNothingRefused: a worker under the shipped permissions joins
// and runs a task without one refused request. A refused request only shows
// as a timeout to the asker (the server reports the violation on the
// connection): a worker's join that read the shard table directly from
// AX_CONTROL, which workers may not, stalled for the JetStream timeout.
func TestWorkerAsksNothingRefused(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, nil)
	submit(t, m.control, "ax.submit.p2.acme.echo.k1", "refused-1", []byte(`{}`), nil)
	select {
	case task := <-m.ran:
		if task.ID != "refused-1" {
			t.Fatalf("ran %s, want refused-1", task.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not run")
	}
	time.Sleep(time.Second) // a violation is reported asynchronously
	for {
		select {
		case err := <-m.worker.errs:
			if strings.Contains(err.Error(), "Permissions Violation") {
				t.Errorf("the worker asked for what it may not: %v", err)
			}
			continue
		default:
		}
		break
	}
}
