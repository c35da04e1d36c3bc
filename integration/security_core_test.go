package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// Issue 13: "core" is a permission, not a claim. Under the shipped
// permissions, once a bucket reaches the refuse level the server itself
// refuses the service's submits, whatever headers they carry and whether or
// not the producer follows the pressure report; core-service, which may
// publish on ax.core.>, still gets its tasks in; and the service cannot
// publish there. At 54cd21a core was the header Ax-Core, honoured from
// anyone, and the server stored every submit up to the bucket's capacity.
func TestCoreIsAPermission(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, &streams.Config{Capacity: 20})
	ctx := context.Background()
	l, err := scheduler.New(ctx, m.control.js, &scheduler.Config{
		PressureInterval: 50 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(lctx) }()
	t.Cleanup(func() { stop(); <-done })

	service := connectAs(t, m.srv, "service")
	core := connectAs(t, m.srv, "core-service")
	names := streams.DefaultNames()
	publish := func(rc *roleConn, subject, id string, headers map[string]string) error {
		msg := nats.NewMsg(subject)
		msg.Header.Set(streams.HeaderMsgID, id)
		for k, v := range headers {
			msg.Header.Set(k, v)
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := rc.js.PublishMsg(pctx, msg)
		return err
	}

	// The worker holds two "hold" tasks; the rest wait in AX_P2: 16 of 20
	// is the refuse level (80%).
	for i := range 16 {
		require.NoError(t, publish(service, names.SubmitSubject(2, "acme", "hold", fmt.Sprintf("k%d", i)), fmt.Sprintf("fill-%d", i), nil))
	}
	require.Eventually(t, func() bool {
		s, err := m.control.js.Stream(ctx, "AX_P2")
		return err == nil && names.Refusing(s.CachedInfo().Config)
	}, 15*time.Second, 20*time.Millisecond, "the leader makes AX_P2 refuse non-core tasks")

	err = publish(service, names.SubmitSubject(2, "acme", "hold", "claims-core"), "claims-core", map[string]string{"Ax-Core": "true"})
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "a service's submit is refused by the server, Ax-Core or not")

	corePublish := names.CoreSubject(2, "acme", "hold", "sneak")
	require.NoError(t, service.nc.Publish(corePublish, nil))
	service.requireViolation(t, "Publish", corePublish)

	require.NoError(t, publish(core, names.CoreSubject(2, "acme", "hold", "vip"), "vip", nil), "core-service's core task is admitted")
	err = publish(core, names.SubmitSubject(2, "acme", "hold", "plain"), "plain", nil)
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "core-service's non-core submit is refused too")

	s, err := m.control.js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	require.EqualValues(t, 17, s.CachedInfo().State.Msgs, "16 filled and 1 core: nothing else stored")

	// Once the held tasks end the bucket drains below 60% and admits again.
	close(m.release)
	require.Eventually(t, func() bool {
		s, err := m.control.js.Stream(ctx, "AX_P2")
		return err == nil && !names.Refusing(s.CachedInfo().Config)
	}, 30*time.Second, 50*time.Millisecond, "admitted again after draining")
	require.NoError(t, publish(service, names.SubmitSubject(2, "acme", "echo", "after"), "after", nil))
}
