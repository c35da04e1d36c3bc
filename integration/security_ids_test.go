package integration

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// idMesh is a server started from docs/ax-permissions.conf with the
// management API (as scheduler) and no worker until startWorker.
type idMesh struct {
	srv      *natstest.Server
	control  *roleConn
	operator *roleConn
	acme     *roleConn
	globex   *roleConn
	ran      chan *worker.Task // every task the "echo" handler ran
}

func startIDMesh(t *testing.T) *idMesh {
	t.Helper()
	ctx := context.Background()
	m := &idMesh{srv: natstest.Start(t, natstest.Options{ConfigFile: permissionsFile}), ran: make(chan *worker.Task, 64)}
	m.control = connectAs(t, m.srv, "scheduler")
	natstest.Provision(t, m.control.js, &streams.Config{AckWait: 5 * time.Second})
	svc, err := admin.New(ctx, m.control.js, &admin.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	t.Cleanup(func() { _ = svc.Stop(ctx) })
	m.operator = connectAs(t, m.srv, "operator")
	m.acme = connectAs(t, m.srv, "producer-acme")
	m.globex = connectAs(t, m.srv, "producer-globex")
	return m
}

// startWorker starts worker-1 (as its user) with an "echo" handler.
func (m *idMesh) startWorker(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	wc := connectAs(t, m.srv, "worker-1")
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("echo", func(_ context.Context, task *worker.Task) error {
		m.ran <- task
		return nil
	}, nil))
	w, err := worker.New(ctx, wc.js, &worker.Config{ID: "worker-1", Registry: reg, Concurrency: 2,
		AckWait: 5 * time.Second, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// publish publishes a task as rc (the wire contract: subject, Nats-Msg-Id)
// and returns the stream's ack.
func publish(t *testing.T, rc *roleConn, subject, id, payload string) (duplicate bool) {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(payload)
	msg.Header.Set(streams.HeaderMsgID, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := rc.js.PublishMsg(ctx, msg)
	require.NoError(t, err, "publish %s", subject)
	return ack.Duplicate
}

// tenantTask is the operator's task.get of a tenant's task.
func (m *idMesh) tenantTask(tenant, id string) (*kv.Record, error) {
	var reply admin.TaskReply
	err := callAdmin(m.operator, admin.VerbTaskGet, map[string]string{"id": id, "tenant": tenant}, &reply)
	return reply.Task, err
}

// waitTenantState waits until the operator sees tenant's task id in state.
func (m *idMesh) waitTenantState(t *testing.T, tenant, id string, state kv.State) *kv.Record {
	t.Helper()
	var rec *kv.Record
	require.Eventually(t, func() bool {
		got, err := m.tenantTask(tenant, id)
		if err != nil || got.Tenant != tenant {
			return false
		}
		rec = got
		return rec.State == state
	}, 30*time.Second, 50*time.Millisecond, "%s's task %s never %s (last seen %+v)", tenant, id, state, rec)
	return rec
}

// ranPayloads collects what the echo handler ran until want tasks ran.
func (m *idMesh) ranPayloads(t *testing.T, want int) map[string]string {
	t.Helper()
	got := map[string]string{}
	deadline := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case task := <-m.ran:
			got[string(task.Payload)] = task.ID
		case <-deadline:
			t.Fatalf("%d of %d tasks ran: %v", len(got), want, got)
		}
	}
	return got
}

// A task id belongs to its tenant (issue 23.2): two tenants' equal ids are
// two tasks, and what an operator does to one tenant's tasks never touches
// another's. Each attack is made as the roles of docs/ax-permissions.conf.
func TestTenantsOwnTheirIDs(t *testing.T) {
	t.Parallel()
	t.Run("a cancel scoped to one tenant leaves the other's task with the same id", func(t *testing.T) {
		// Reproduced before the fix: same id submitted by two tenants, no
		// workers running, `ax tasks cancel --tenant acme`: globex's task
		// was cancelled and never ran.
		m := startIDMesh(t)
		require.False(t, publish(t, m.acme, "ax.submit.p1.acme.echo.k", "same-1", "acme-payload"))
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "same-1", "globex-payload"))
		out := runAx(t, "tasks", "cancel", "--tenant", "acme", "--server", m.srv.ClientURL(), "--user", "operator", "--password", "operator-secret")
		require.Contains(t, out, "1 tasks match, 1 cancelled")
		require.Contains(t, out, "acme\tsame-1")
		require.NotContains(t, out, "globex")
		m.startWorker(t)
		m.waitTenantState(t, "globex", "same-1", kv.StateSucceeded)
		require.Equal(t, map[string]string{"globex-payload": "same-1"}, m.ranPayloads(t, 1))
		m.waitTenantState(t, "acme", "same-1", kv.StateCancelled)
	})
	t.Run("a tenant cannot squat another's id", func(t *testing.T) {
		// acme runs a task with an id globex uses later: globex's task
		// still runs, with its own payload (before the fix it was dropped:
		// "message names task … but is globex").
		m := startIDMesh(t)
		m.startWorker(t)
		require.False(t, publish(t, m.acme, "ax.submit.p1.acme.echo.k", "squat-1", "acme-payload"))
		m.waitTenantState(t, "acme", "squat-1", kv.StateSucceeded)
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "squat-1", "globex-payload"))
		m.waitTenantState(t, "globex", "squat-1", kv.StateSucceeded)
		require.Equal(t, map[string]string{"acme-payload": "squat-1", "globex-payload": "squat-1"}, m.ranPayloads(t, 2))
	})
	t.Run("a tenant's publish of another's id in the same bucket is no duplicate", func(t *testing.T) {
		// JetStream de-duplicates by Nats-Msg-Id per stream, across
		// tenants: within its window (2 min before) globex's publish was
		// answered "duplicate" and never stored. The buckets' window is now
		// the server's least (100ms), and a Nats-Msg-Id "<id>:<token>"
		// (the Go client's form) is de-duplicated by the whole value, so
		// an unguessable token closes even that window.
		m := startIDMesh(t)
		m.startWorker(t)
		require.False(t, publish(t, m.acme, "ax.submit.p2.acme.echo.k", "squat-2:acme-token", "acme-payload"))
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "squat-2:globex-token", "globex-payload"),
			"globex's task is stored")
		require.False(t, publish(t, m.acme, "ax.submit.p2.acme.echo.k", "squat-3", "acme-payload-3"))
		time.Sleep(streams.DefaultBucketDuplicates + 50*time.Millisecond) // past the buckets' window
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "squat-3", "globex-payload-3"),
			"globex's task is stored")
		for _, id := range []string{"squat-2", "squat-3"} {
			m.waitTenantState(t, "globex", id, kv.StateSucceeded)
			m.waitTenantState(t, "acme", id, kv.StateSucceeded)
		}
		require.Len(t, m.ranPayloads(t, 4), 4)
	})
}
