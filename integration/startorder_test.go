package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Processes of a deployment start in any order (issue 17.4): an `ax worker`
// started before NATS is up, and before the streams and buckets exist,
// waits with a log line saying what it waits for, then joins and runs
// tasks. At 54cd21a it exited at once.
func TestWorkerStartedFirstWaits(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	w := startAx(t, "worker", "--server", url, "--id", "early", "--concurrency", "2")
	require.Eventually(t, func() bool {
		return strings.Contains(w.output(), `"for": "nats"`) || strings.Contains(w.output(), `"for":"nats"`)
	},
		20*time.Second, 50*time.Millisecond, "the worker says it waits for NATS:\n%s", w.output())
	require.False(t, w.exited(), "the worker exited:\n%s", w.output())

	// NATS comes up without the ax streams: the worker waits for them.
	srv := startAx(t, "server", "--listen", strings.TrimPrefix(url, "nats://"), "--data", t.TempDir())
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "streams and buckets") }, 30*time.Second, 50*time.Millisecond,
		"the worker says it waits for the buckets:\n%s", w.output())
	require.False(t, w.exited(), "the worker exited:\n%s", w.output())
	_ = srv

	// Provisioning half done (it writes the streams, then the buckets one by
	// one): AX_WORKERS is missing. The worker must go on waiting; it used to
	// pass its wait on AX_TASKS alone, then exit binding AX_WORKERS (seen in
	// CI).
	_, js := connect(t, url)
	ctx := context.Background()
	_, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	// Every bucket but AX_WORKERS, as kv.Provision makes them: a bucket
	// provisioned and then deleted would leave the worker a moment in
	// which the deployment is whole (it could start, then fail to bind).
	names := streams.Names{}
	for _, bucket := range []string{names.TasksBucket(), names.LocksBucket(), names.ControlBucket(), names.LimitsBucket()} {
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: time.Minute})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "AX_WORKERS") }, 30*time.Second, 50*time.Millisecond,
		"the worker says it waits for AX_WORKERS:\n%s", w.output())
	require.False(t, w.exited(), "the worker exited:\n%s", w.output())

	runAx(t, "provision", "--server", url)
	out := runAx(t, "submit", "echo", "--id", "early-task", "--server", url)
	require.Contains(t, out, "early-task")
	require.Eventually(t, func() bool {
		bucket, err := js.KeyValue(context.Background(), "AX_TASKS")
		if err != nil {
			return false
		}
		entry, err := bucket.Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: "early-task"}.Key())
		return err == nil && strings.Contains(string(entry.Value()), string(kv.StateSucceeded))
	}, 60*time.Second, 100*time.Millisecond, "the early worker ran the task:\n%s", w.output())
}

// A wrong password is not waited out: `ax worker` exits at once, saying
// why, instead of logging "waiting" forever (docs/OPERATIONS.md).
func TestWorkerWithWrongPasswordExits(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "auth.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`authorization { users = [ { user: "w", password: "right" } ] }`), 0o600))
	srv := natstest.Start(t, natstest.Options{ConfigFile: conf})
	url := strings.Replace(srv.ClientURL(), "nats://", "nats://w:wrong@", 1)
	w := startAx(t, "worker", "--server", url, "--id", "badpass")
	require.Eventually(t, w.exited, 15*time.Second, 50*time.Millisecond, "still running:\n%s", w.output())
	require.Contains(t, strings.ToLower(w.output()), "authorization")
	require.NotContains(t, w.output(), "wrong", "the password is redacted")
}
