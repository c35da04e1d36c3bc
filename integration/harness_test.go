package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// axBinary is the ax binary built once for the whole package.
var axBinary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here runs the ax binary as processes against a server
		// of their own, most with faults and timing: the fast tier leaves
		// them to the whole suite.
		fmt.Println("integration: skipped under -short (process and fault tests)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "ax-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	axBinary = filepath.Join(dir, "ax")
	build := exec.Command("go", "build", "-o", axBinary, "../cmd/ax")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build ax:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a running ax process whose output is kept for failure reports.
type process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startAx starts `ax args...` and stops it (SIGTERM, then SIGKILL) at cleanup.
func startAx(t testing.TB, args ...string) *process {
	t.Helper()
	return startAxVia(t, nil, args...)
}

// startAxVia starts `ax args...` through wrapper, a command that ends by
// executing its arguments in place (such as `ip netns exec NS`), so that
// the process started is ax itself; with no wrapper it is [startAx].
func startAxVia(t testing.TB, wrapper []string, args ...string) *process {
	t.Helper()
	argv := append(append(slices.Clone(wrapper), axBinary), args...)
	p := &process{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
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
			t.Logf("output of ax %s:\n%s", strings.Join(args, " "), p.output())
		}
	})
	return p
}

// devServer is an `ax dev` process serving on its own port.
type devServer struct {
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
}

// startDev runs `ax dev --demo 0` with extra args and waits until ax is provisioned.
func startDev(t testing.TB, extra ...string) *devServer {
	t.Helper()
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	args := append([]string{"dev", "--demo", "0", "--listen", strings.TrimPrefix(url, "nats://"), "--data", t.TempDir()}, extra...)
	p := startAx(t, args...)
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "serving") }, 60*time.Second, 50*time.Millisecond,
		"ax dev did not start:\n%s", p.output())
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &devServer{url: url, nc: nc, js: js}
}

// waitCronFires waits until the one cron job fired n more times, as its
// record's Last (written by the leader at each fire) tells: a job firing
// every period must move Last on by n periods.
func waitCronFires(t *testing.T, client *ax.Client, period time.Duration, n int) {
	t.Helper()
	jobs, err := client.ListCron(context.Background())
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	from := jobs[0].Last
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		jobs, err := client.ListCron(context.Background())
		if assert.NoError(c, err) && assert.Len(c, jobs, 1) {
			assert.GreaterOrEqual(c, jobs[0].Last.Sub(from), time.Duration(n)*period, "%d more fires after %s", n, from)
		}
	}, 30*time.Second, 100*time.Millisecond)
}

// tb is what a helper fails through: a test, or the collector of an
// EventuallyWithT condition, which runs off the test goroutine (a require
// there must fail the attempt, not the test from another goroutine).
type tb interface {
	require.TestingT
	Helper()
}

// runAx runs one ax command to completion and returns its stdout.
func runAx(t tb, args ...string) string {
	t.Helper()
	out, err := axOutput(args...)
	require.NoError(t, err)
	return out
}

// axOutput runs the ax binary and returns its stdout, or an error with its
// stderr: for conditions polled off the test goroutine.
func axOutput(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, axBinary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("ax %s: %w\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// signal sends sig to the process.
func (p *process) signal(t testing.TB, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// kill SIGKILLs the process and waits for it to exit.
func (p *process) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// devAt runs `ax dev --demo 0 --workers 0` on a fixed address and data
// directory (so that it can be restarted) with extra args.
func devAt(t testing.TB, url, data string, extra ...string) *process {
	t.Helper()
	args := append([]string{"dev", "--demo", "0", "--workers", "0", "--listen", strings.TrimPrefix(url, "nats://"), "--data", data}, extra...)
	p := startAx(t, args...)
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "serving") || p.exited() }, 60*time.Second, 50*time.Millisecond)
	require.False(t, p.exited(), "ax dev exited:\n%s", p.output())
	return p
}

// connect opens a client connection to url, closed at cleanup.
func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// leaderTTL is the leader lease TTL of the schedulers [startSchedulers] runs.
const leaderTTL = 2 * time.Second

// startSchedulers runs one `ax server` node, provisions it with the fault
// suite's ack wait and starts two schedulers, s1 and s2, contending for a
// leader lease of leaderTTL (each with extra args); it returns once one
// leads.
func startSchedulers(t testing.TB, extra ...string) (url string, js jetstream.JetStream, schedulers map[string]*process) {
	t.Helper()
	port := freePort(t)
	url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	srv := startAx(t, "server", "--name", "solo", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data", t.TempDir())
	_, js = connect(t, url)
	require.Eventually(t, func() bool { return strings.Contains(srv.output(), "serving") }, 30*time.Second, 50*time.Millisecond)
	runAx(t, "provision", "--server", url, "--ack-wait", faultAckWait)
	schedulers = map[string]*process{}
	for _, id := range []string{"s1", "s2"} {
		args := []string{"scheduler", "--server", url, "--scheduler-id", id, "--lease-ttl", leaderTTL.String(), "--ack-wait", faultAckWait}
		schedulers[id] = startAx(t, append(args, extra...)...)
	}
	require.Eventually(t, func() bool { return leaderOf(js) != "" }, 30*time.Second, 50*time.Millisecond, "no leader")
	return url, js, schedulers
}

// leaderOf returns the id of the scheduler holding the leader lease, or ""
// when nobody holds it (or it cannot be read).
func leaderOf(js jetstream.JetStream) string {
	ctx := context.Background()
	locks, err := js.KeyValue(ctx, "AX_LOCKS")
	if err != nil {
		return ""
	}
	e, err := locks.Get(ctx, "leader")
	if err != nil {
		return ""
	}
	var rec kv.LeaseRecord
	if json.Unmarshal(e.Value(), &rec) != nil {
		return ""
	}
	return rec.Holder
}

// newMsg builds a message with headers.
func newMsg(subject, body string, header map[string]string) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	for k, v := range header {
		msg.Header.Set(k, v)
	}
	return msg
}

// storeGet reads the record of the one task of any tenant with id, or,
// when tasks of several tenants have it, the default tenant's (the Go
// client's default, which the tests' own tasks have; a hostile producer's
// message with their id is a task of its own tenant).
func storeGet(ctx context.Context, store *kv.Store, id string) (*kv.Record, uint64, error) {
	refs, err := store.Find(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	switch len(refs) {
	case 0:
		// A task of generated id waits without a record until its claim
		// writes one: the record that claim starts from.
		waiting, err := store.Unclaimed(ctx, id, "")
		if err == nil && len(waiting) == 1 {
			return waiting[0], 0, nil
		}
		// Claimed between the two reads: its record is there now.
		if refs, err = store.Find(ctx, id); err == nil && len(refs) == 1 {
			return store.Get(ctx, refs[0])
		}
		return nil, 0, fmt.Errorf("get task %s: %w", id, kv.ErrNotFound)
	case 1:
		return store.Get(ctx, refs[0])
	}
	for _, ref := range refs {
		if ref.Tenant == ax.DefaultTenant {
			return store.Get(ctx, ref)
		}
	}
	return nil, 0, fmt.Errorf("get task %s: %d tenants have it: %v", id, len(refs), refs)
}
