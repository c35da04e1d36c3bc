package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// roleConn is a connection as one user of docs/ax-permissions.conf whose
// permission violations are collected.
type roleConn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connectAs(t *testing.T, srv *natstest.Server, user string) *roleConn {
	t.Helper()
	rc := &roleConn{errs: make(chan error, 64)}
	rc.nc, rc.js = srv.Connect(nats.UserInfo(user, user+"-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
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

func callAdmin(rc *roleConn, verb string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return scheduler.NewAdminClient(rc.nc, streams.Names{}).Call(ctx, verb, req, resp)
}

// The server configuration of docs/SECURITY.md gives each role exactly what
// it needs: a task published by the service runs on the worker and the
// operator sees it and cancels through the API, while every role is refused
// what belongs to another.
func TestPermissionsOfEachRole(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{ConfigFile: "../docs/ax-permissions.conf"})
	ctx := context.Background()

	control := connectAs(t, srv, "scheduler")
	natstest.Provision(t, control.js, &streams.Config{AckWait: 5 * time.Second})
	admin, err := scheduler.NewAdmin(ctx, control.js, &scheduler.AdminConfig{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, admin.Start(ctx))
	t.Cleanup(func() { _ = admin.Stop(ctx) })

	wc := connectAs(t, srv, "worker")
	cancelled := make(chan error, 1)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("echo", func(context.Context, *worker.Task) error { return nil }, nil))
	require.NoError(t, reg.Handle("block", func(ctx context.Context, _ *worker.Task) error {
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	}, nil))
	w, err := worker.New(ctx, wc.js, &worker.Config{Registry: reg, Concurrency: 2, AckWait: 5 * time.Second, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	// The service may publish to ax.submit.> (and gets its ack).
	service := connectAs(t, srv, "service")
	for _, id := range []string{"sec-echo", "sec-block"} {
		msg := nats.NewMsg("ax.submit.p1.acme." + strings.TrimPrefix(id, "sec-") + "." + id)
		msg.Header.Set(streams.HeaderMsgID, id)
		_, err := service.js.PublishMsg(ctx, msg)
		require.NoError(t, err, "the service may submit")
	}

	// The worker ran the task and moved its record; the operator reads it.
	operator := connectAs(t, srv, "operator")
	require.Eventually(t, func() bool {
		var reply scheduler.TaskReply
		return callAdmin(operator, scheduler.VerbTaskGet, scheduler.TaskRequest{ID: "sec-echo"}, &reply) == nil &&
			reply.Task.State == kv.StateSucceeded
	}, 30*time.Second, 100*time.Millisecond)
	// The operator cancels a running task and the worker hears the notice.
	require.Eventually(t, func() bool {
		var reply scheduler.TaskReply
		return callAdmin(operator, scheduler.VerbTaskGet, scheduler.TaskRequest{ID: "sec-block"}, &reply) == nil &&
			reply.Task.State == kv.StateRunning
	}, 30*time.Second, 100*time.Millisecond)
	var reply scheduler.TaskReply
	require.NoError(t, callAdmin(operator, scheduler.VerbTaskCancel, scheduler.TaskRequest{ID: "sec-block"}, &reply))
	require.True(t, reply.Notified)
	select {
	case cause := <-cancelled:
		require.ErrorIs(t, cause, worker.ErrCancelled)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not hear the cancel notice")
	}
	// The operator may inspect streams (read-only), as the nats CLI does.
	_, err = operator.js.Stream(ctx, "AX_P1")
	require.NoError(t, err)

	t.Run("the ax CLI connects as a user", func(t *testing.T) {
		out := ax(t, "task", "get", "sec-echo", "--server", srv.ClientURL(), "--user", "operator", "--password", "operator-secret")
		require.Contains(t, out, "SUCCEEDED")
		require.Contains(t, axFail(t, "task", "get", "sec-echo", "--server", srv.ClientURL(), "--user", "operator", "--password", "wrong"),
			"Authorization Violation")
	})
	t.Run("service cannot call the admin API", func(t *testing.T) {
		require.Error(t, callAdmin(service, scheduler.VerbTaskGet, scheduler.TaskRequest{ID: "sec-echo"}, &reply))
		service.requireViolation(t, "Publish", "ax.admin.task.get")
	})
	t.Run("service cannot read the task bucket", func(t *testing.T) {
		_, err := service.js.KeyValue(ctx, "AX_TASKS")
		require.Error(t, err)
		service.requireViolation(t, "Publish", "$JS.API.STREAM.INFO.KV_AX_TASKS")
		_, err = service.nc.SubscribeSync("$KV.AX_TASKS.>")
		require.NoError(t, err) // refused asynchronously
		service.requireViolation(t, "Subscription", "$KV.AX_TASKS.>")
	})
	t.Run("worker cannot call the admin API or submit", func(t *testing.T) {
		require.Error(t, callAdmin(wc, scheduler.VerbTaskCancel, scheduler.TaskRequest{ID: "sec-echo"}, &reply))
		wc.requireViolation(t, "Publish", "ax.admin.task.cancel")
		require.NoError(t, wc.nc.Publish("ax.submit.p0.acme.echo.x", nil))
		wc.requireViolation(t, "Publish", "ax.submit.p0.acme.echo.x")
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
