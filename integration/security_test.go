package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// permissionsFile is the single-account server configuration, for a
// deployment with one trusted producer: every role's boundary is tried on
// it (each user's permissions are the same in accountsFile).
const permissionsFile = "../docs/ax-permissions.conf"

// accountsFile is the deployment docs/SECURITY.md starts with: each
// tenant's producer in an account of its own.
const accountsFile = "../docs/ax-tenant-accounts.conf"

// roleConn is a connection as one user of docs/ax-permissions.conf whose
// permission violations are collected.
type roleConn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

// connectAs connects as user (natstest.Server.ConnectAs) and keeps the
// errors the server reports to the connection, such as permission
// violations.
func connectAs(t *testing.T, srv *natstest.Server, user string) *roleConn {
	t.Helper()
	rc := &roleConn{errs: make(chan error, 64)}
	rc.nc, rc.js = srv.ConnectAs(user, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case rc.errs <- err:
		default:
		}
	}))
	return rc
}

// requireViolation waits for the server to report a permission violation
// on subject ("Publish" or "Subscription").
func (rc *roleConn) requireViolation(t *testing.T, kind, subject string) {
	t.Helper()
	want := `Permissions Violation for ` + kind + ` to "` + subject + `"`
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-rc.errs:
			if strings.Contains(err.Error(), want) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q reported", want)
		}
	}
}

// requireSubscribeRefused subscribes to subject and waits for the refusal;
// it returns the subscription, which must never receive a message.
func (rc *roleConn) requireSubscribeRefused(t *testing.T, subject string) *nats.Subscription {
	t.Helper()
	sub, err := rc.nc.SubscribeSync(subject)
	require.NoError(t, err) // refused asynchronously
	rc.requireViolation(t, "Subscription", subject)
	return sub
}

func callAdmin(rc *roleConn, verb string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return admin.NewClient(rc.nc, streams.Names{}).Call(ctx, verb, req, resp)
}

// secureMesh is a server started from docs/ax-permissions.conf with the
// management API (as scheduler) and one worker (as worker-1, id worker-1).
type secureMesh struct {
	srv       *natstest.Server
	control   *roleConn
	worker    *roleConn
	cancelled chan error        // causes of the "block" handlers' ends
	ran       chan *worker.Task // every task an "echo" handler ran
	release   chan struct{}     // closing it ends the "hold" handlers
}

func startSecureMesh(t *testing.T, cfg *streams.Config) *secureMesh {
	t.Helper()
	return startSecureMeshOn(t, permissionsFile, cfg)
}

// startSecureMeshOn is [startSecureMesh] on a server started from file.
func startSecureMeshOn(t *testing.T, file string, cfg *streams.Config) *secureMesh {
	t.Helper()
	ctx := context.Background()
	m := &secureMesh{srv: natstest.Start(t, natstest.Options{ConfigFile: file}),
		cancelled: make(chan error, 16), ran: make(chan *worker.Task, 1024), release: make(chan struct{})}
	m.control = connectAs(t, m.srv, "scheduler")
	if cfg == nil {
		cfg = &streams.Config{}
	}
	cfg.AckWait = 5 * time.Second
	natstest.Provision(t, m.control.js, cfg)
	svc, err := admin.New(ctx, m.control.js, &admin.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	t.Cleanup(func() { _ = svc.Stop(ctx) })

	m.worker = connectAs(t, m.srv, "worker-1")
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("echo", func(_ context.Context, task *worker.Task) error {
		select {
		case m.ran <- task:
		default:
		}
		return nil
	}, nil))
	require.NoError(t, reg.Handle("block", func(ctx context.Context, _ *worker.Task) error {
		<-ctx.Done()
		m.cancelled <- context.Cause(ctx)
		return ctx.Err()
	}, nil))
	require.NoError(t, reg.Handle("hold", func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-m.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil))
	w, err := worker.New(ctx, m.worker.js, &worker.Config{ID: "worker-1", Registry: reg, Concurrency: 2,
		AckWait: 5 * time.Second, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return m
}

// submit publishes a task as rc with the wire contract (subject and
// Nats-Msg-Id as the task id) and requires the stream's ack.
func submit(t *testing.T, rc *roleConn, subject, id string, payload []byte, headers map[string]string) {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = payload
	msg.Header.Set(streams.HeaderMsgID, id)
	for k, v := range headers {
		msg.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := rc.js.PublishMsg(ctx, msg)
	require.NoError(t, err, "publish %s as a permitted role", subject)
}

// waitState waits until the operator sees task id in state.
func waitState(t *testing.T, operator *roleConn, id string, state kv.State) *kv.Record {
	t.Helper()
	return axtest.WaitState(t, operator.readTask, id, 30*time.Second, state)
}

// readTask reads the record of task id through the management API.
func (rc *roleConn) readTask(_ context.Context, id string) (*kv.Record, error) {
	var reply admin.TaskReply
	if err := callAdmin(rc, admin.VerbTaskGet, admin.TaskRequest{ID: id}, &reply); err != nil {
		return nil, err
	}
	return reply.Task, nil
}

// The server configuration of docs/SECURITY.md gives each role exactly what
// it needs: a task published by the service runs on the worker and the
// operator sees it and cancels through the API, while every role is refused
// what belongs to another.
func TestPermissionsOfEachRole(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, nil)
	ctx := context.Background()
	srv, wc := m.srv, m.worker

	// The service may publish to ax.submit.> (and gets its ack on its inbox).
	service := connectAs(t, srv, "service")
	submit(t, service, "ax.submit.p1.acme.echo.sec-echo", "sec-echo", []byte("acme-secret-payload"), nil)
	submit(t, service, "ax.submit.p1.acme.block.sec-block", "sec-block", nil, nil)

	// The worker ran the task and moved its record; the operator reads it.
	operator := connectAs(t, srv, "operator")
	waitState(t, operator, "sec-echo", kv.StateSucceeded)
	// The operator cancels a running task and the worker hears the notice.
	waitState(t, operator, "sec-block", kv.StateRunning)
	var reply admin.TaskReply
	require.NoError(t, callAdmin(operator, admin.VerbTaskCancel, admin.TaskRequest{ID: "sec-block"}, &reply))
	require.True(t, reply.Notified)
	select {
	case cause := <-m.cancelled:
		require.ErrorIs(t, cause, worker.ErrCancelled)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not hear the cancel notice")
	}
	// The operator may inspect streams (read-only), as the nats CLI does.
	_, err := operator.js.Stream(ctx, "AX_P1")
	require.NoError(t, err)

	t.Run("the ax CLI connects as a user with its own inbox", func(t *testing.T) {
		out := runAx(t, "task", "get", "sec-echo", "--server", srv.ClientURL(), "--user", "operator", "--password", "operator-secret")
		require.Contains(t, out, "SUCCEEDED")
		require.Contains(t, axFail(t, "task", "get", "sec-echo", "--server", srv.ClientURL(), "--user", "operator", "--password", "wrong"),
			"Authorization Violation")
	})
	t.Run("a failed connect never prints the password of the server URL", func(t *testing.T) {
		url := strings.Replace(srv.ClientURL(), "nats://", "nats://operator:pw-LEAK-42@", 1)
		out := axFail(t, "task", "get", "sec-echo", "--server", url)
		require.Contains(t, out, "Authorization Violation")
		require.NotContains(t, out, "pw-LEAK-42")
		require.Contains(t, out, "nats://operator:xxxxx@")
	})
	t.Run("service cannot call the admin API", func(t *testing.T) {
		require.Error(t, callAdmin(service, admin.VerbTaskGet, admin.TaskRequest{ID: "sec-echo"}, &reply))
		service.requireViolation(t, "Publish", "ax.admin.task.get")
	})
	t.Run("service and worker cannot publish a control-plane copy", func(t *testing.T) {
		// Only on ax.p<N>.….ctl are the internal headers honoured: the
		// scheduler alone may publish there.
		copySubject := streams.DefaultNames().CopySubject(2, "acme", "echo", "x")
		require.NoError(t, service.nc.Publish(copySubject, nil))
		service.requireViolation(t, "Publish", copySubject)
		require.NoError(t, wc.nc.Publish(copySubject, nil))
		wc.requireViolation(t, "Publish", copySubject)
	})
	t.Run("service cannot read the task bucket", func(t *testing.T) {
		_, err := service.js.KeyValue(ctx, "AX_TASKS")
		require.Error(t, err)
		service.requireViolation(t, "Publish", "$JS.API.STREAM.INFO.KV_AX_TASKS")
		service.requireSubscribeRefused(t, "$KV.AX_TASKS.>")
	})
	t.Run("service cannot read another role's inbox", func(t *testing.T) {
		var subs []*nats.Subscription
		for _, subject := range []string{"_INBOX.>", "_INBOX.worker-1.>", "_INBOX.operator.>", "_INBOX.scheduler.>"} {
			subs = append(subs, service.requireSubscribeRefused(t, subject))
		}
		// A task delivered to the worker, a record read and an admin reply
		// later: none reaches the service.
		submit(t, service, "ax.submit.p1.acme.echo.sec-inbox", "sec-inbox", []byte("acme-secret-payload"), nil)
		waitState(t, operator, "sec-inbox", kv.StateSucceeded)
		for _, sub := range subs {
			msg, err := sub.NextMsg(100 * time.Millisecond)
			require.Error(t, err, "the service saw %v", msg)
		}
	})
	t.Run("worker cannot call the admin API or submit", func(t *testing.T) {
		require.Error(t, callAdmin(wc, admin.VerbTaskCancel, admin.TaskRequest{ID: "sec-echo"}, &reply))
		wc.requireViolation(t, "Publish", "ax.admin.task.cancel")
		require.NoError(t, wc.nc.Publish("ax.submit.p0.acme.echo.x", nil))
		wc.requireViolation(t, "Publish", "ax.submit.p0.acme.echo.x")
	})
	t.Run("worker hears and answers only its own cancel notices and replies", func(t *testing.T) {
		other := connectAs(t, srv, "worker-2")
		other.requireSubscribeRefused(t, "ax.worker.worker-1.cancel")
		other.requireSubscribeRefused(t, "ax.worker.*.cancel")
		// Nor another worker's replies: the tasks its pulls receive.
		other.requireSubscribeRefused(t, "_INBOX.worker-1.>")
		other.requireSubscribeRefused(t, "_INBOX.worker.>")
		_, err := other.nc.SubscribeSync("ax.worker.worker-2.cancel")
		require.NoError(t, err)
		require.NoError(t, other.nc.Flush())
		select {
		case err := <-other.errs:
			t.Fatalf("worker-2 refused its own cancel subject: %v", err)
		default:
		}
	})
	t.Run("worker cannot delete or read dead letters", func(t *testing.T) {
		_, err := wc.nc.Request("$JS.API.STREAM.MSG.DELETE.AX_DLQ", []byte(`{"seq":1}`), time.Second)
		require.Error(t, err)
		wc.requireViolation(t, "Publish", "$JS.API.STREAM.MSG.DELETE.AX_DLQ")
		// Nor read the dead letters or the schedules.
		for _, subject := range []string{"$JS.API.STREAM.INFO.AX_DLQ", "$JS.API.DIRECT.GET.AX_DLQ", "$JS.API.DIRECT.GET.AX_DELAYED"} {
			_, err := wc.nc.Request(subject, []byte(`{"seq":1}`), time.Second)
			require.Error(t, err)
			wc.requireViolation(t, "Publish", subject)
		}
	})
	t.Run("worker defers a raw delayed task to AX_DELAYED", func(t *testing.T) {
		runAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		submit(t, service, "ax.submit.p2.acme.echo.sec-later", "sec-later", nil, map[string]string{streams.HeaderRunAt: runAt})
		waitState(t, operator, "sec-later", kv.StatePending)
		// The record is written before the schedule (so that a message
		// never replaces another task's schedule): wait for the schedule.
		require.Eventually(t, func() bool {
			info, err := operator.js.Stream(ctx, "AX_DELAYED")
			return err == nil && info.CachedInfo().State.Msgs == 1
		}, 10*time.Second, 20*time.Millisecond, "the schedule is in AX_DELAYED")
	})
	t.Run("operator cannot submit or write records directly", func(t *testing.T) {
		require.NoError(t, operator.nc.Publish("ax.submit.p0.acme.echo.y", nil))
		operator.requireViolation(t, "Publish", "ax.submit.p0.acme.echo.y")
		require.NoError(t, operator.nc.Publish("$KV.AX_TASKS.sec-echo", []byte("{}")))
		operator.requireViolation(t, "Publish", "$KV.AX_TASKS.sec-echo")
		err := operator.js.DeleteStream(ctx, "AX_P1")
		require.True(t, err != nil && !errors.Is(err, jetstream.ErrStreamNotFound))
		operator.requireViolation(t, "Publish", "$JS.API.STREAM.DELETE.AX_P1")
	})
}
