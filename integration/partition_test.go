//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Scenario 8: a worker cut off from NATS by a network partition while it
// runs a task stops its handler once its heartbeats go unconfirmed for 5/6
// of the ack wait, before another worker can take the task over; the task
// is taken over, its side effect applied once, by the new owner; when the
// network heals the cut-off worker rejoins the mesh. The worker runs in
// a network namespace of its own and reaches the server through a relay in
// the test process; the cut takes the namespace's loopback down.
//
// As in scenario 2 the cut-off worker owns the task's shard, and only a
// shard's owner pulls it: the other worker takes the task over once both
// the ack wait and the cut-off worker's membership lease have lapsed and
// the shard has moved. The heal comes after the new owner has finished, as
// SIGCONT does in scenario 2: the cut-off worker's requests sent during the
// cut are delivered on the heal, not lost.
func TestNetworkPartition(t *testing.T) {
	t.Parallel()
	ns := newNetns(t)
	m := newMesh(t)
	relay := startRelay(t, ns, strings.TrimPrefix(m.url, "nats://"))
	cut := m.spawnVia([]string{"ip", "netns", "exec", ns.name}, "nats://"+relay.addr)
	m.waitTable(cut) // then the other joins and takes half: the cut-off worker's half was never the other's
	other := m.spawn()
	id := m.submitProbeOn(m.waitTable(cut, other), cut, 4000)
	require.Equal(t, cut, m.waitClaim(id), "the owner of the task's shard runs it")
	stale := m.workers[cut]

	// With its loopback down the namespace delivers nothing: every segment
	// of the relayed connection, both ways, is dropped, while both ends keep
	// the connection and retransmit, as across a broken network. The heal
	// resumes the same connection.
	ns.ip(t, "link", "set", "lo", "down")
	cutAt := time.Now()
	t.Cleanup(func() { ns.heal() }) // if the test ends early: stop the worker as usual
	rec := m.waitTakeover(id, other)
	// Cut off, the worker fenced itself: no heartbeat of its was confirmed,
	// so it cancelled the handler and gave the claim up, all before the heal.
	fencedAt, reason, ok := lostClaim(stale.output(), id)
	require.True(t, ok, "the cut-off worker must give up its claim during the cut:\n%s", stale.output())
	require.Contains(t, reason, "claim lapsed")
	ns.ip(t, "link", "set", "lo", "up")
	healedAt := time.Now()

	runs := m.requireFenced(id, cut, other, rec)
	require.True(t, runs[0].aborted, "the cut-off worker's handler was cancelled, not finished: %+v", runs[0])
	require.True(t, runs[0].end.Before(runs[1].start), "the cut-off execution ended before the takeover started: %+v", runs)

	// The cut-off worker lives on: it rejoins the mesh and, once it is alone, runs a new task.
	m.waitTable(cut, other)
	m.stop(other)
	next := m.submitProbes(1, 10, 10)[0]
	require.Eventually(t, func() bool {
		r, _, err := storeGet(context.Background(), m.client.Store(), next)
		return err == nil && r.State == kv.StateSucceeded && r.Worker == cut
	}, 30*time.Second, 50*time.Millisecond, "the healed worker runs a new task:\n%s", stale.output())
	require.False(t, stale.exited(), "the healed worker exited:\n%s", stale.output())
	require.NotContains(t, stale.output(), "panic")
	t.Logf("network partition: handler cancelled %s after the cut (%s), takeover %s after the cut (ack wait %s, membership TTL 10s), "+
		"healed %s after the cut; 1 side effect; the healed worker rejoined and ran a new task",
		runs[0].end.Sub(cutAt).Round(time.Millisecond), reason, runs[1].start.Sub(cutAt).Round(time.Millisecond), faultAckWait,
		healedAt.Sub(cutAt).Round(time.Millisecond))
	require.True(t, fencedAt.Before(healedAt))
}

// lostClaim finds the lost_claim line about task id in a worker's log
// and returns when it was written and its reason.
func lostClaim(output, id string) (at time.Time, reason string, ok bool) {
	for _, e := range logEntries(output) {
		if e.Msg == "lost_claim" && e.field("task_id") == id {
			return e.TS, e.field("reason"), !e.TS.IsZero()
		}
	}
	return time.Time{}, "", false
}

// netnsCount numbers the network namespaces of this test process.
var netnsCount atomic.Int32

// netns is a network namespace made for one test and deleted at cleanup.
type netns struct {
	name string // ax-part-<test process id>-<n>
	path string // its bind mount, for setns
}

// newNetns makes a network namespace with its loopback up. Where this
// machine cannot (no ip binary, not root or no CAP_SYS_ADMIN) it skips the
// test, or fails it where namespaces are required (AX_REQUIRE_NETNS=1,
// which .ci/run sets).
func newNetns(t *testing.T) *netns {
	t.Helper()
	removeOrphanNetns(t)
	name := fmt.Sprintf("ax-part-%d-%d", os.Getpid(), netnsCount.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		skipNetns(t, "network namespaces are not available here (`ip netns add` needs the ip binary (Debian: iproute2) and root or CAP_SYS_ADMIN): %s",
			commandError(err, out))
	}
	n := &netns{name: name, path: filepath.Join("/var/run/netns", name)}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("delete network namespace %s: %s", name, commandError(err, out))
		}
	})
	if out, err := exec.Command("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		skipNetns(t, "cannot run commands in a network namespace here (`ip netns exec`): %s", commandError(err, out))
	}
	// A connection cut for longer than a few seconds backs its
	// retransmissions off exponentially (120 s at most by default), so after
	// the heal it could stay silent for as long again. Where the kernel has
	// it (Linux 6.15), cap the retransmission timeout in the namespace at
	// its minimum, 1 s, so that a healed connection resumes within a second;
	// elsewhere the scenario still holds, only slower.
	err := n.do(func() error { return os.WriteFile("/proc/sys/net/ipv4/tcp_rto_max_ms", []byte("1000"), 0) })
	if errors.Is(err, unix.EPERM) {
		skipNetns(t, "cannot enter a network namespace here (setns): %v", err)
	}
	if err != nil {
		t.Logf("retransmission timeout left uncapped, a healed connection may resume slowly: %v", err)
	}
	return n
}

// skipNetns skips the test for want of network namespaces, or fails it
// where they are required (AX_REQUIRE_NETNS=1).
func skipNetns(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("AX_REQUIRE_NETNS") == "1" {
		t.Fatalf(format+" (AX_REQUIRE_NETNS=1: network namespaces are required)", args...)
	}
	t.Skipf(format+"; skipped (AX_REQUIRE_NETNS=1 makes this a failure)", args...)
}

// removeOrphanNetns deletes the namespaces of test processes that ended
// without their cleanup (killed, or timed out).
func removeOrphanNetns(t *testing.T) {
	names, _ := filepath.Glob("/var/run/netns/ax-part-*")
	for _, path := range names {
		name := filepath.Base(path)
		pid, err := strconv.Atoi(strings.Split(name, "-")[2])
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("delete orphan network namespace %s: %s", name, commandError(err, out))
		}
	}
}

// ip runs `ip args...` inside the namespace.
func (n *netns) ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.name, "ip"}, args...)...).CombinedOutput()
	require.NoError(t, err, "ip %s in %s: %s", strings.Join(args, " "), n.name, out)
}

// commandError describes a failed command by its error and output.
func commandError(err error, out []byte) string {
	if out = bytes.TrimSpace(out); len(out) > 0 {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return err.Error()
}

// heal brings the namespace's loopback up, whatever its state.
func (n *netns) heal() {
	_ = exec.Command("ip", "netns", "exec", n.name, "ip", "link", "set", "lo", "up").Run()
}

// do runs fn on a thread inside the namespace (see [netns.enter]). A
// socket stays in the namespace it was made in, so only its making needs
// to be done here.
func (n *netns) do(fn func() error) error {
	done := make(chan error, 1)
	go n.enter(fn, done)
	return <-done
}

// enter locks its goroutine to its thread, moves the thread into the
// namespace, runs fn there and sends its error to done. It never unlocks
// the thread, so the runtime ends the thread with the goroutine and no
// other goroutine ever runs in the namespace. The process's main thread is
// the exception: the runtime parks it for good instead, and it would keep
// the namespace alive after its deletion. On that thread, enter holds it,
// so that the goroutine it starts lands on another, and tries again there.
func (n *netns) enter(fn func() error, done chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		retried := make(chan struct{})
		go func() {
			defer close(retried)
			n.enter(fn, done)
		}()
		<-retried
		runtime.UnlockOSThread() // it never left the test's namespace
		return
	}
	f, err := os.Open(n.path)
	if err != nil {
		done <- err
		return
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		done <- fmt.Errorf("setns %s: %w", n.name, err)
		return
	}
	done <- fn()
}

// relay lets processes in a network namespace reach a server listening on
// 127.0.0.1 in the test's namespace: it accepts connections inside the
// namespace and copies each, both ways, to a connection it dials to the
// server from the test's namespace.
type relay struct {
	addr   string // host:port to connect to, inside the namespace
	target string // the server's host:port
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and the copies

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open connections, both sides (mu)
	closed bool                  // (mu)
}

// startRelay starts a relay from ns to target, closed at cleanup.
func startRelay(t *testing.T, ns *netns, target string) *relay {
	t.Helper()
	var ln net.Listener
	require.NoError(t, ns.do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}))
	r := &relay{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// accept relays each connection accepted until the listener is closed.
func (r *relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.DialTimeout("tcp", r.target, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !r.track(in, out) {
			return
		}
		r.wg.Add(2)
		go r.pipe(in, out)
		go r.pipe(out, in)
	}
}

// track records open connections, or closes them if the relay is closed.
func (r *relay) track(conns ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range conns {
		if r.closed {
			_ = c.Close()
			continue
		}
		r.conns[c] = struct{}{}
	}
	return !r.closed
}

// pipe copies src to dst until either ends, then closes both, which ends
// the copy the other way too.
func (r *relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	_, _ = io.Copy(dst, src)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range []net.Conn{dst, src} {
		_ = c.Close()
		delete(r.conns, c)
	}
}

// close stops accepting, closes every connection and waits for the copies.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
}
