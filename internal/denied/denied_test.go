package denied_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakOptions()...)
}

// Parse reads the server's reports as nats.go passes them on, and nothing
// else.
func TestParse(t *testing.T) {
	pub := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_AX_LOCKS"`)
	d := denied.Parse(pub, "worker-1")
	require.NotNil(t, d)
	require.Equal(t, "permission denied: user worker-1 may not publish $JS.API.STREAM.INFO.KV_AX_LOCKS (docs/ax-permissions.conf)", d.Error())
	require.ErrorIs(t, d, nats.ErrPermissionViolation)

	sub := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "ax.worker.x.cancel" using queue "q"`)
	d = denied.Parse(sub, "")
	require.NotNil(t, d)
	require.Equal(t, "permission denied: this connection's user may not subscribe to ax.worker.x.cancel (docs/ax-permissions.conf)", d.Error())

	require.Nil(t, denied.Parse(nil, "u"))
	require.Nil(t, denied.Parse(errors.New(`Permissions Violation for Publish to "x"`), "u"), "not a nats permission error")
	require.Nil(t, denied.Parse(nats.ErrSlowConsumer, "u"))
	require.Same(t, d, denied.Parse(fmt.Errorf("wrapped: %w", d), "other"))
}

// A guard ends its context at once when the server refuses a request,
// which would otherwise wait out its timeout, and names the subject; a
// refused subscription is seen by Check; a violation from before the
// watch is not blamed on the guarded work.
// With the command it ended, an error names the user and the command, the
// subject as the reason; a refused reply inbox is named as one.
func TestErrorNamesTheCommand(t *testing.T) {
	d := &denied.Error{User: "operator", Op: denied.OpPublish, Subject: "$KV.AX_CONTROL.cron.nightly", Command: "ax cron rm", Hint: "run it as the scheduler user"}
	require.Equal(t, "permission denied: user operator may not run `ax cron rm`: the server refused it publish $KV.AX_CONTROL.cron.nightly (docs/ax-permissions.conf): run it as the scheduler user", d.Error())
	inbox := &denied.Error{User: "producer-acme", Op: denied.OpSubscribe, Subject: "_INBOX.service.abc.*", Command: "ax submit"}
	require.Equal(t, "permission denied: user producer-acme may not run `ax submit`: the server refused it the reply inbox _INBOX.service.abc.* (--inbox-prefix; the shipped users have _INBOX.<user>) (docs/ax-permissions.conf)", inbox.Error())
}

func TestGuard(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "auth.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`authorization { users = [
		{ user: "u", password: "p", permissions: { publish: { allow: ["ok.>", "_INBOX.>"] }, subscribe: { allow: ["_INBOX.>", "ok.>"] } } }
	] }`), 0o600))
	srv := natstest.Start(t, natstest.Options{ConfigFile: conf})
	nc, _ := srv.Connect(nats.UserInfo("u", "p"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))

	// A violation before the watch.
	require.NoError(t, nc.Publish("early.denied", nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return nc.LastError() != nil }, 5*time.Second, 10*time.Millisecond)

	g, ctx := denied.Watch(context.Background(), nc)
	require.NoError(t, g.Check(ctx), "the earlier violation is not this work's")
	start := time.Now()
	_, err := nc.RequestWithContext(ctx, "denied.request", nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 2*time.Second)
	err = g.Err(err)
	require.EqualError(t, err, "permission denied: user u may not publish denied.request (docs/ax-permissions.conf)")
	var d *denied.Error
	require.ErrorAs(t, context.Cause(ctx), &d)
	g.Stop()
	g.Stop()

	g, ctx = denied.Watch(context.Background(), nc)
	defer g.Stop()
	_, err = nc.Subscribe("denied.sub", func(*nats.Msg) {})
	require.NoError(t, err, "refused asynchronously")
	require.EqualError(t, g.Check(ctx), "permission denied: user u may not subscribe to denied.sub (docs/ax-permissions.conf)")
}
