package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// roleServer is a server started from a permissions file whose
// permission violations, as the server logs them, are kept.
type roleServer struct {
	*natstest.Server
	mu         sync.Mutex
	violations []string
}

// startRoleServer starts a server from conf and records its violations.
func startRoleServer(t *testing.T, conf string) *roleServer {
	t.Helper()
	s := &roleServer{Server: natstest.Start(t, natstest.Options{ConfigFile: conf})}
	s.SetLogger(s, false, false)
	return s
}

// Violations returns the permission violations the server logged so far.
func (s *roleServer) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Errorf keeps the violations; the other levels are dropped.
func (s *roleServer) Errorf(format string, v ...any) {
	if line := fmt.Sprintf(format, v...); strings.Contains(line, "Violation") {
		s.mu.Lock()
		s.violations = append(s.violations, line)
		s.mu.Unlock()
	}
}
func (s *roleServer) Noticef(string, ...any) {}
func (s *roleServer) Warnf(string, ...any)   {}
func (s *roleServer) Fatalf(string, ...any)  {}
func (s *roleServer) Debugf(string, ...any)  {}
func (s *roleServer) Tracef(string, ...any)  {}

// roleEnv is the environment of an ax process run as user of
// docs/ax-permissions.conf (password "<user>-secret") against url.
func roleEnv(url, user string) []string {
	return append(os.Environ(), "NATS_URL="+url, "NATS_USER="+user, "NATS_PASSWORD="+user+"-secret",
		"NATS_CREDS=", "NATS_NKEY=", "AX_INBOX_PREFIX=")
}

// startAxAs starts `ax args...` as user, stopped (SIGINT, then SIGKILL) at
// cleanup, like [startAx].
func startAxAs(t *testing.T, url, user string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(axBinary, args...), done: make(chan struct{})}
	p.cmd.Env = roleEnv(url, user)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of ax %s as %s:\n%s", strings.Join(args, " "), user, p.output())
		}
	})
	return p
}

// runAxAs runs `ax args...` as user to its end, within limit, and returns
// its stdout, its stderr and its error.
func runAxAs(url, user string, limit time.Duration, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, axBinary, args...)
	cmd.Env = roleEnv(url, user)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("ax %s as %s: %w\nstderr: %s", strings.Join(args, " "), user, err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// mustAxAs is [runAxAs] that must succeed within a minute.
func mustAxAs(t tb, url, user string, args ...string) string {
	t.Helper()
	out, _, err := runAxAs(url, user, time.Minute, args...)
	require.NoError(t, err)
	return out
}

// connectRole connects as user (natstest.Server.ConnectAs), closed at
// cleanup.
func connectRole(t *testing.T, srv *roleServer, user string) *nats.Conn {
	t.Helper()
	nc, _ := srv.ConnectAs(user)
	return nc
}

// Every role runs the way docs/SECURITY.md says, as a process on a
// separate server started from the file it starts with
// (docs/ax-tenant-accounts.conf: each tenant's producer in an account of
// its own), and from the single-account docs/ax-permissions.conf: the
// scheduler provisions and runs the control plane, worker-1 runs tasks that
// the service and producer-acme submit (with the CLI and with the Go
// client), the operator reads them, with the CLI and the dashboard, and the
// worker stops cleanly; the server reports no permission violation at all.
// Before the fix the worker waited forever for AX_LOCKS, and the submits
// failed after 5 s binding AX_P0.
func TestDeployedRoles(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			deployedRoles(t, file)
		})
	}
}

func deployedRoles(t *testing.T, file string) {
	srv := startRoleServer(t, file)
	url := srv.ClientURL()

	// The start sequence of docs/SECURITY.md; a scheduler started before
	// ax provision waits for it, saying so.
	sched := startAxAs(t, url, "scheduler", "scheduler")
	require.Eventually(t, func() bool { return strings.Contains(sched.output(), "run ax provision") || sched.exited() },
		30*time.Second, 50*time.Millisecond, "ax scheduler does not say it waits for ax provision:\n%s", sched.output())
	mustAxAs(t, url, "scheduler", "provision")
	w := startAxAs(t, url, "worker-1", "worker", "--id", "worker-1", "--concurrency", "4", "--metrics-addr", "127.0.0.1:0")
	require.Eventually(t, func() bool { return strings.Contains(sched.output(), "campaigning") || sched.exited() },
		30*time.Second, 50*time.Millisecond, "ax scheduler did not start:\n%s", sched.output())
	require.False(t, sched.exited(), "ax scheduler exited:\n%s", sched.output())
	metricsURL := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	require.Eventually(t, func() bool { return metricsURL.MatchString(w.output()) || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not start:\n%s", w.output())
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	require.False(t, w.exited(), "ax worker exited:\n%s", w.output())

	// The operator limits echo mesh-wide, with the CLI: every worker (as
	// deployed, in its role) takes a slot of AX_LIMITS for each echo task.
	require.Contains(t, mustAxAs(t, url, "operator", "limit", "set", "echo", "--concurrency", "2", "--rate", "100"), "echo")

	// Submits as the service and as a tenant's producer, with the CLI.
	require.Equal(t, "role-service", strings.TrimSpace(mustAxAs(t, url, "service",
		"submit", "echo", "--publish-only", "--payload", "hi", "--id", "role-service")))
	require.Equal(t, "role-acme", strings.TrimSpace(mustAxAs(t, url, "producer-acme",
		"submit", "echo", "--publish-only", "--tenant", "acme", "--inbox-prefix", "_INBOX.producer-acme", "--id", "role-acme")))
	require.Equal(t, "role-later", strings.TrimSpace(mustAxAs(t, url, "service",
		"submit", "echo", "--publish-only", "--delay", "1s", "--id", "role-later")))

	// A unique task, with the CLI as the tenant's producer (its claims in
	// AX_UNIQUE and its records, read one key at a time): a second submit
	// within the period prints the first task and publishes nothing.
	uniqueArgs := func(id string) []string {
		return []string{"submit", "echo", "--publish-only", "--tenant", "acme", "--inbox-prefix", "_INBOX.producer-acme",
			"--unique-for", "1h", "--unique-key", "nightly", "--id", id}
	}
	t.Run("a unique task as the tenant's producer", func(t *testing.T) {
		require.Equal(t, "role-unique", strings.TrimSpace(mustAxAs(t, url, "producer-acme", uniqueArgs("role-unique")...)))
		require.Equal(t, "role-unique (duplicate: this task holds the unique key; nothing published)",
			strings.TrimSpace(mustAxAs(t, url, "producer-acme", uniqueArgs("role-unique-2")...)))
	})

	// And with the Go client, publish-only, as each.
	ctx := context.Background()
	service, err := ax.NewClient(ctx, jsOf(t, connectRole(t, srv, "service")), &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	_, err = service.Submit(ctx, ax.TaskSpec{Type: "echo", ID: "role-go-service"})
	require.NoError(t, err)
	_, err = service.SubmitBatch(ctx, []ax.TaskSpec{{Type: "echo", ID: "role-go-batch-1"}, {Type: "echo", ID: "role-go-batch-2"}})
	require.NoError(t, err)
	acme, err := ax.NewClient(ctx, jsOf(t, connectRole(t, srv, "producer-acme")), &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	info, err := acme.Submit(ctx, ax.TaskSpec{Type: "echo", Tenant: "acme", ID: "role-go-acme"})
	require.NoError(t, err)
	require.False(t, info.Duplicate)
	// A re-submit is a message of its own (each submit's Nats-Msg-Id
	// carries a token of its own, so no other tenant's publish of the id
	// is taken for it); the worker that sees it drops it: the task runs once.
	again, err := acme.Submit(ctx, ax.TaskSpec{Type: "echo", Tenant: "acme", ID: "role-go-acme"})
	require.NoError(t, err)
	require.False(t, again.Duplicate, "a publish-only client cannot read the record that decides")
	// A batch pipelines its publishes through replies to the producer's
	// own inbox prefix, the only one its permissions let it subscribe to.
	batch, err := acme.SubmitBatch(ctx, []ax.TaskSpec{{Type: "echo", Tenant: "acme", ID: "role-go-acme-batch-1"}, {Type: "echo", Tenant: "acme", ID: "role-go-acme-batch-2"}})
	require.NoError(t, err)
	require.Len(t, batch, 2)

	// A second worker through the Go API as worker-2, opened on the
	// deployment handle.
	wctx, stopW2 := context.WithCancel(ctx)
	w2done := make(chan error, 1)
	{
		d, err := deploy.Open(ctx, jsOf(t, connectRole(t, srv, "worker-2")), nil)
		require.NoError(t, err)
		reg := worker.NewRegistry()
		require.NoError(t, reg.Handle("echo", func(_ context.Context, task *worker.Task) error {
			task.SetResult(task.Payload)
			return nil
		}, nil))
		w2, err := d.Worker(ctx, &worker.Config{ID: "worker-2", Registry: reg, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		go func() { w2done <- w2.Run(wctx) }()
	}

	// The operator sees every task succeed, and the workers.
	for _, id := range []string{"role-service", "role-acme", "role-later", "role-go-service", "role-go-batch-1", "role-go-batch-2", "role-go-acme", "role-go-acme-batch-1", "role-go-acme-batch-2", "role-unique"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, _, err := runAxAs(url, "operator", time.Minute, "task", "get", id)
			assert.NoError(c, err)
			assert.Regexp(c, `State\s+SUCCEEDED`, out)
		}, 30*time.Second, 200*time.Millisecond, "task %s", id)
	}
	t.Run("results: the scheduler waits, the operator watches and reads", func(t *testing.T) {
		require.Equal(t, "hi", mustAxAs(t, url, "scheduler", "submit", "echo", "--payload", "hi", "--id", "role-wait", "--wait",
			"--inbox-prefix", "_INBOX.scheduler"))
		require.Contains(t, mustAxAs(t, url, "operator", "task", "watch", "role-wait"), "SUCCEEDED")
		require.Equal(t, "hi", mustAxAs(t, url, "operator", "task", "result", "role-wait"))
	})
	t.Run("a succeeded unique task still holds its key", func(t *testing.T) {
		require.Equal(t, "role-unique (duplicate: this task holds the unique key; nothing published)",
			strings.TrimSpace(mustAxAs(t, url, "producer-acme", uniqueArgs("role-unique-3")...)))
		_, _, err := runAxAs(url, "operator", time.Minute, "task", "get", "role-unique-2", "--tenant", "acme")
		require.ErrorContains(t, err, "unknown task", "the duplicates made no task")
	})
	t.Run("the workers honoured the operator's limit", func(t *testing.T) {
		require.Regexp(t, `(?m)^echo\s+2\s+0\s+100\s`, mustAxAs(t, url, "operator", "limit", "ls"))
		limits, err := jsOf(t, connectRole(t, srv, "operator")).KeyValue(ctx, "AX_LIMITS")
		require.NoError(t, err)
		_, err = limits.Get(ctx, kv.SlotsKey("echo"))
		require.NoError(t, err, "no worker took a slot of the limit")
		_, err = limits.Get(ctx, kv.RateKey("echo"))
		require.NoError(t, err, "no worker took a start of the limit")
		require.Contains(t, mustAxAs(t, url, "operator", "pause", "echo"), "paused echo")
		require.NotContains(t, mustAxAs(t, url, "operator", "resume", "echo"), "paused echo")
		require.Contains(t, mustAxAs(t, url, "operator", "limit", "rm", "echo"), "no limits, nothing paused")
	})
	require.Regexp(t, `(?m)^p2\s+0\s`, mustAxAs(t, url, "operator", "stats"))
	require.Contains(t, mustAxAs(t, url, "operator", "workers"), "worker-1")

	// The dashboard as the operator answers a page with the buckets.
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dash := startAxAs(t, url, "operator", "dashboard", "--addr", addr)
	require.Eventually(t, func() bool { return strings.Contains(dash.output(), "dashboard on http://") || dash.exited() },
		30*time.Second, 50*time.Millisecond, "ax dashboard did not start:\n%s", dash.output())
	res, err := http.Get("http://" + addr + "/api/overview")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.Contains(t, string(body), "AX_P0")

	// The worker's metrics, scraped: its own, read without a denied subject.
	res, err = http.Get(metricsURL.FindStringSubmatch(w.output())[1])
	require.NoError(t, err)
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "ax_tasks_total")

	// Every process stops cleanly.
	stopW2()
	select {
	case err := <-w2done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("worker-2 did not stop")
	}
	stopCleanly(t, srv, map[string]*process{"worker": w, "dashboard": dash, "scheduler": sched})
}

// jsOf returns a JetStream handle on nc.
func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// A role missing a permission gets one clear error naming the subject and
// the user, at once, instead of waiting: a worker whose publish list lacks
// the record bucket's stream info, a worker run with another id than its
// user's (its cancel subject is refused), a service running `ax submit`
// without --publish-only, and the Go client and constructors on such
// connections. Before the fix the worker waited forever and the submit
// failed after 5 s with "context deadline exceeded".
func TestMissingPermissionFailsFast(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile(permissionsFile)
	require.NoError(t, err)
	const lacking = `"$JS.API.STREAM.INFO.KV_AX_TASKS",`
	require.Contains(t, string(shipped), lacking)
	// worker-1 loses the line (WORKER_PUBLISH is shared: give worker-1 its own copy without it).
	conf := strings.Replace(string(shipped), "WORKER_PUBLISH: [", "WORKER_1_PUBLISH: ["+strings.Replace(workerPublish(t, string(shipped)), lacking, "", 1)+"]\nWORKER_PUBLISH: [", 1)
	conf = strings.Replace(conf, "user: worker-1, password: worker-1-secret\n        permissions: {\n          publish:   { allow: $WORKER_PUBLISH }",
		"user: worker-1, password: worker-1-secret\n        permissions: {\n          publish:   { allow: $WORKER_1_PUBLISH }", 1)
	require.Contains(t, conf, "$WORKER_1_PUBLISH")
	path := filepath.Join(t.TempDir(), "ax-permissions.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	srv := startRoleServer(t, path)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")

	cases := []struct {
		name, user string
		args       []string
		want       string
	}{
		{"worker lacking a subject", "worker-1", []string{"worker", "--id", "worker-1"},
			"permission denied: user worker-1 may not run `ax worker`: the server refused it publish $JS.API.STREAM.INFO.KV_AX_TASKS"},
		{"worker with another id than its user's", "worker-2", []string{"worker", "--id", "other"},
			"permission denied: user worker-2 may not run `ax worker`: the server refused it subscribe to ax.worker.other.cancel (docs/ax-permissions.conf): a worker's ID (ax worker --id) is its user's name"},
		{"service submitting with records", "service", []string{"submit", "echo", "--payload", "hi", "--publish-only=false"},
			"permission denied: user service may not run `ax submit`: the server refused it publish $JS.API.STREAM.INFO.AX_P0 (docs/ax-permissions.conf): a producer allowed only to submit sets Config.PublishOnly (ax submit --publish-only)"},
		{"operator running a worker", "operator", []string{"worker", "--id", "operator"},
			"permission denied: user operator may not run `ax worker`: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, stderr, err := runAxAs(url, c.user, 30*time.Second, c.args...)
			took := time.Since(start)
			t.Logf("ax %s as %s failed after %s", strings.Join(c.args, " "), c.user, took.Round(time.Millisecond))
			require.Error(t, err, "ax %s as %s must fail", strings.Join(c.args, " "), c.user)
			require.Less(t, took, 4*time.Second, "ax %s as %s failed only after %s:\n%s", strings.Join(c.args, " "), c.user, took, stderr)
			require.Contains(t, stderr, c.want)
			require.Contains(t, stderr, "docs/ax-permissions.conf")
			require.Equal(t, 1, strings.Count(stderr, "permission denied"), "one error:\n%s", stderr)
		})
	}

	t.Run("Go client and constructors", func(t *testing.T) {
		ctx := context.Background()
		start := time.Now()
		_, err := ax.NewClient(ctx, jsOf(t, connectRole(t, srv, "service")), nil)
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.ErrorContains(t, err, "permission denied: user service may not publish $JS.API.STREAM.INFO.AX_P0")
		require.ErrorContains(t, err, "PublishOnly")
		_, err = worker.New(ctx, jsOf(t, connectRole(t, srv, "worker-1")), &worker.Config{Registry: worker.NewRegistry()})
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.ErrorContains(t, err, "user worker-1 may not publish $JS.API.STREAM.INFO.KV_AX_TASKS")
		_, err = deploy.Open(ctx, jsOf(t, connectRole(t, srv, "producer-acme")), nil)
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.ErrorContains(t, err, "user producer-acme may not publish $JS.API.STREAM.INFO.AX_P0")
		require.Less(t, time.Since(start), 4*time.Second)
	})
}

// workerPublish returns the body of the WORKER_PUBLISH list of conf.
func workerPublish(t *testing.T, conf string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)WORKER_PUBLISH: \[(.*?)\n\]`).FindStringSubmatch(conf)
	require.NotNil(t, m, "WORKER_PUBLISH in the permissions file")
	return m[1] + "\n"
}

// A worker whose user may not send the batched record read (a direct get
// of many keys, $JS.API.DIRECT.GET.KV_AX_TASKS itself: a permissions file
// written before workers batched their claims) fails at New, at once,
// naming the subject, instead of failing its first busy claim.
func TestWorkerWithoutBatchedReadFailsFast(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile(permissionsFile)
	require.NoError(t, err)
	const lacking = "\"$JS.API.DIRECT.GET.KV_AX_TASKS\",\n"
	require.Contains(t, string(shipped), lacking)
	conf := strings.Replace(string(shipped), lacking, "", 1)
	path := filepath.Join(t.TempDir(), "ax-permissions.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	srv := startRoleServer(t, path)
	mustAxAs(t, srv.ClientURL(), "scheduler", "provision")

	start := time.Now()
	_, err = worker.New(context.Background(), jsOf(t, connectRole(t, srv, "worker-1")), &worker.Config{Registry: worker.NewRegistry()})
	require.ErrorIs(t, err, nats.ErrPermissionViolation)
	require.ErrorContains(t, err, "user worker-1 may not publish $JS.API.DIRECT.GET.KV_AX_TASKS")
	require.Less(t, time.Since(start), 4*time.Second)
}

// A fair deployment as deployed: the file docs/SECURITY.md starts with
// (docs/ax-tenant-accounts.conf), each role a process. The scheduler
// provisions it with --fair, the leader gives each
// tenant it hears (the service's default tenant, acme's and globex's
// producers) its consumers, and the worker, in its role, watches the
// tenants and runs every task; nobody is refused a subject.
func TestDeployedFairRoles(t *testing.T) {
	t.Parallel()
	srv := startRoleServer(t, accountsFile)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision", "--fair")
	sched := startAxAs(t, url, "scheduler", "scheduler")
	w := startAxAs(t, url, "worker-1", "worker", "--id", "worker-1", "--concurrency", "4")
	// The scheduler says it campaigns once its management API answers:
	// the operator's first verb waits for that line, not for luck.
	require.Eventually(t, func() bool { return strings.Contains(sched.output(), "campaigning") || sched.exited() },
		30*time.Second, 50*time.Millisecond, "ax scheduler did not start:\n%s", sched.output())
	require.False(t, sched.exited(), "ax scheduler exited:\n%s", sched.output())
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	require.False(t, w.exited(), "ax worker exited:\n%s", w.output())
	// The operator gives acme a weight: the worker, in its role, applies
	// it; a weight of a key pattern is refused with its reason.
	mustAxAs(t, url, "operator", "limit", "set", "tenant:acme", "--weight", "3")
	require.Regexp(t, `(?m)^tenant:acme\s+-\s+-\s+-\s+-\s+-\s+3\s`, mustAxAs(t, url, "operator", "limit", "ls"))
	_, stderr, err := runAxAs(url, "operator", time.Minute, "limit", "set", "key:k*", "--weight", "3")
	require.Error(t, err)
	require.Contains(t, stderr, "not of a key pattern")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "limits_changed") }, 30*time.Second, 50*time.Millisecond)

	submits := map[string][]string{
		"service":         {"submit", "echo", "--publish-only", "--id", "fair-service"},
		"producer-acme":   {"submit", "echo", "--publish-only", "--tenant", "acme", "--inbox-prefix", "_INBOX.producer-acme", "--id", "fair-acme"},
		"producer-globex": {"submit", "echo", "--publish-only", "--tenant", "globex", "--inbox-prefix", "_INBOX.producer-globex", "--id", "fair-globex"},
	}
	for user, args := range submits {
		mustAxAs(t, url, user, args...)
	}
	for id, tenant := range map[string]string{"fair-service": "default", "fair-acme": "acme", "fair-globex": "globex"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, _, err := runAxAs(url, "operator", time.Minute, "task", "get", id, "--tenant", tenant)
			assert.NoError(c, err)
			assert.Regexp(c, `State\s+SUCCEEDED`, out)
		}, 60*time.Second, 200*time.Millisecond, "task %s", id)
	}
	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})
}

// stopCleanly stops each process (SIGINT) and requires that it exits 0
// within 30 s without a permission error in its output, then that srv
// logged no permission violation.
func stopCleanly(t *testing.T, srv *roleServer, procs map[string]*process) {
	t.Helper()
	for name, p := range procs {
		p.signal(t, os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("ax %s did not stop:\n%s", name, p.output())
		}
		require.Zero(t, p.cmd.ProcessState.ExitCode(), "ax %s:\n%s", name, p.output())
		require.NotContains(t, p.output(), "ermission", "ax %s", name)
	}
	require.Empty(t, srv.Violations(), "the server reported permission violations")
}
