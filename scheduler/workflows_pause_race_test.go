package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A pause racing a release under way: the leader is inside the release of
// a child (its publish held on the wire by the test) when the pause is
// written. workflow.pause answers only once the leader has seen the pause,
// so the tasks released when it answers are all that run until the
// resume: the child, whose release was under way, is released before the
// answer, and its own child (released on its success) is held. Without the
// leader's confirmation the verb answered at once, with the child not yet
// released, and the child was released after the answer (red).
func TestWorkflowPauseWaitsForReleaseUnderWay(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	gate := &writeGate{marker: []byte(".child."), caught: make(chan struct{})}
	t.Cleanup(gate.open)
	leader := b.StartLeader(t, scheduler.Config{LeaseTTL: 10 * time.Second}, nats.SetCustomDialer(gate))
	leader.WaitLeading(t)
	release := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{}
	reg := worker.NewRegistry()
	count := func(id string) {
		mu.Lock()
		runs[id]++
		mu.Unlock()
	}
	require.NoError(t, reg.Handle("held", func(ctx context.Context, task *worker.Task) error {
		count(task.ID)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))
	require.NoError(t, reg.Handle("child", func(_ context.Context, task *worker.Task) error {
		count(task.ID)
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	api := b.StartAdmin(t, nil)
	ctx := context.Background()
	wf := ax.NewWorkflow("wf-pause-underway").Chain(
		ax.Step{Name: "parent", Spec: ax.TaskSpec{Type: "held"}},
		ax.Step{Name: "child", Spec: ax.TaskSpec{Type: "child"}},
		ax.Step{Name: "grandchild", Spec: ax.TaskSpec{Type: "child"}})
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	b.WaitState(t, wf.TaskID("parent"), kv.StateRunning)

	released := func(name string) bool { // a message in a bucket, or a record
		id := wf.TaskID(name)
		if axtest.BucketTaskIDs(t, ctx, b.JS)[id] {
			return true
		}
		_, _, err := b.Store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
		if errors.Is(err, kv.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	gate.arm()
	close(release) // the parent succeeds: the leader releases the child
	select {
	case <-gate.caught: // the leader is inside the child's release
	case <-time.After(30 * time.Second):
		t.Fatal("the leader never released the child")
	}
	type answer struct {
		reply *admin.WorkflowPauseReply
		err   error
		took  time.Duration
		child bool // released when the verb answered
	}
	returned := make(chan struct{})  // the verb answered
	answered := make(chan answer, 1) // and what was released then
	go func() {
		start := time.Now()
		reply, err := api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
		took := time.Since(start)
		close(returned)
		answered <- answer{reply: reply, err: err, took: took, child: released("child")}
	}()
	select {
	case <-returned: // with the release held: read what was released, then let it go
		got := <-answered
		gate.open()
		answered <- got
	case <-time.After(300 * time.Millisecond):
		gate.open() // the release goes out; the leader then sees the pause
	}
	got := <-answered
	require.NoError(t, got.err)
	require.True(t, got.reply.Paused)
	require.True(t, got.reply.Confirmed, "the leader did not confirm the pause")
	t.Logf("workflow.pause answered after %s (the release under way held 300 ms); child released then: %t", got.took, got.child)

	time.Sleep(2 * time.Second) // the child runs; the leader's retry tick, twice
	require.Equal(t, got.child, released("child"), "the child was released after workflow.pause answered")
	require.False(t, released("grandchild"), "a task of a paused workflow was released")

	_, err = api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	b.WaitState(t, wf.TaskID("grandchild"), kv.StateSucceeded)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{wf.TaskID("parent"): 1, wf.TaskID("child"): 1, wf.TaskID("grandchild"): 1}, runs)
}

// writeGate dials connections whose writes it holds, once armed, from the
// first write that contains marker until it is opened: a client frozen in
// the middle of a publish, the rest of the mesh running.
type writeGate struct {
	marker []byte
	caught chan struct{} // closed when a write is held

	mu     sync.Mutex
	armed  bool
	closed chan struct{} // non-nil while writes are held (mu)
}

func (g *writeGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
}

func (g *writeGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = false
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// hold waits while writes are held; a write with the marker, armed, holds
// them.
func (g *writeGate) hold(b []byte) {
	g.mu.Lock()
	if g.armed && g.closed == nil && bytes.Contains(b, g.marker) {
		g.armed = false
		g.closed = make(chan struct{})
		close(g.caught)
	}
	wait := g.closed
	g.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

// Dial implements nats.CustomDialer.
func (g *writeGate) Dial(network, address string) (net.Conn, error) {
	conn, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: conn, gate: g}, nil
}

type gatedConn struct {
	net.Conn
	gate *writeGate
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.gate.hold(b)
	return c.Conn.Write(b)
}

// With no leader, workflow.pause answers after PauseSeenTimeout that the
// pause is not confirmed; a leader that starts reads the mark before it
// releases anything and confirms it, which a pause again then says; the
// resume deletes the mark the leader rewrote.
func TestWorkflowPauseUnconfirmedWithoutLeader(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	api := b.StartAdmin(t, &admin.Config{PauseSeenTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	wf := ax.NewWorkflow("wf-pause-leaderless").Chain(
		ax.Step{Name: "a", Spec: ax.TaskSpec{Type: "x"}},
		ax.Step{Name: "b", Spec: ax.TaskSpec{Type: "x"}})
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	start := time.Now()
	reply, err := api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.True(t, reply.Paused)
	require.True(t, reply.Changed)
	require.False(t, reply.Confirmed, "confirmed with no leader")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	b.StartLeader(t, scheduler.Config{}).WaitLeading(t)
	require.Eventually(t, func() bool {
		again, err := api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
		return err == nil && again.Paused && !again.Changed && again.Confirmed
	}, 30*time.Second, 100*time.Millisecond, "the new leader never confirmed the pause")
	time.Sleep(1500 * time.Millisecond) // the leader's retry tick
	require.False(t, axtest.BucketTaskIDs(t, ctx, b.JS)[wf.TaskID("a")], "the leader released a task of a paused workflow")

	resumed, err := api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.True(t, resumed.Changed)
	require.Eventually(t, func() bool { return axtest.BucketTaskIDs(t, ctx, b.JS)[wf.TaskID("a")] }, 30*time.Second, 50*time.Millisecond,
		"the resume released nothing")
}
