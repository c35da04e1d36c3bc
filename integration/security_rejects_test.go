package integration

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// Under docs/ax-permissions.conf, the leader (as scheduler) may watch the
// mistyped submit subjects and a sample may subscribe to every submit
// subject: a service's mistyped publish is seen, answered and reported to
// the operator, and no role's subscription is refused.
func TestMistypedSubmitSeenUnderPermissions(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := scheduler.New(ctx, m.control.js, &scheduler.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	operator := connectAs(t, m.srv, "operator")
	rejects := func() *control.RejectsReport {
		var reply admin.StatsReply
		if callAdmin(operator, admin.VerbStats, admin.StatsRequest{}, &reply) != nil {
			return nil
		}
		return reply.Rejects
	}
	require.Eventually(t, func() bool { return rejects() != nil }, 30*time.Second, 50*time.Millisecond, "the watch runs")

	service := connectAs(t, m.srv, "service")
	require.NoError(t, service.nc.Publish("ax.submit.p9.acme.echo.k1", nil))
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	_, err = service.js.Publish(pctx, "ax.submit.P1.acme.echo.k1", nil)
	require.ErrorContains(t, err, `priority token "P1" is not p0..p4`)
	require.Eventually(t, func() bool {
		r := rejects()
		return r != nil && r.Total == 2
	}, 10*time.Second, 50*time.Millisecond)

	var sample admin.RejectsSampleReply
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	require.NoError(t, admin.NewClient(operator.nc, streams.Names{}).Call(sctx, admin.VerbRejectsSample,
		admin.RejectsSampleRequest{For: "200ms"}, &sample))
	for _, rc := range []*roleConn{m.control, service, operator} {
		select {
		case err := <-rc.errs:
			t.Fatalf("refused: %v", err)
		default:
		}
	}
}
