package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Two producers, each allowed only its own tenant token in the submit
// subject: one cannot submit, read, cancel or replace the other's tasks,
// with each tenant's producer in an account of its own (the deployment
// docs/SECURITY.md starts with) and in the single account.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			tenantIsolation(t, file)
		})
	}
}

func tenantIsolation(t *testing.T, file string) {
	m := startSecureMeshOn(t, file, nil)
	ctx := context.Background()
	acme := connectAs(t, m.srv, "producer-acme")
	globex := connectAs(t, m.srv, "producer-globex")
	operator := connectAs(t, m.srv, "operator")

	submit(t, acme, "ax.submit.p1.acme.echo.t-acme", "t-acme", []byte("acme-payload"), nil)
	submit(t, globex, "ax.submit.p1.globex.echo.t-globex", "t-globex", []byte("globex-payload"), nil)
	waitState(t, operator, "t-acme", kv.StateSucceeded)
	waitState(t, operator, "t-globex", kv.StateSucceeded)

	t.Run("cannot submit as the other tenant", func(t *testing.T) {
		require.NoError(t, acme.nc.Publish("ax.submit.p1.globex.echo.forged", []byte("x")))
		acme.requireViolation(t, "Publish", "ax.submit.p1.globex.echo.forged")
	})
	t.Run("cannot read the other tenant's tasks", func(t *testing.T) {
		for _, subject := range []string{"_INBOX.producer-globex.>", "_INBOX.>", "_INBOX.worker.>", "$KV.AX_TASKS.>", "ax.submit.>"} {
			acme.requireSubscribeRefused(t, subject)
		}
		_, err := acme.js.KeyValue(ctx, "AX_TASKS")
		require.Error(t, err)
		acme.requireViolation(t, "Publish", "$JS.API.STREAM.INFO.KV_AX_TASKS")
		_, err = acme.nc.Request("$JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS.t-globex", nil, time.Second)
		require.Error(t, err)
		acme.requireViolation(t, "Publish", "$JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS.t-globex")
		// The workers' batched read names its keys in the body, which the
		// server does not check: a producer may not send it at all.
		_, err = acme.nc.Request("$JS.API.DIRECT.GET.KV_AX_TASKS", []byte(`{"multi_last":["$KV.AX_TASKS.globex.t-globex"]}`), time.Second)
		require.Error(t, err)
		acme.requireViolation(t, "Publish", "$JS.API.DIRECT.GET.KV_AX_TASKS")
		var reply admin.TaskReply
		require.Error(t, callAdmin(acme, admin.VerbTaskGet, admin.TaskRequest{ID: "t-globex"}, &reply))
		acme.requireViolation(t, "Publish", "ax.admin.task.get")
	})
	t.Run("cannot cancel the other tenant's tasks", func(t *testing.T) {
		later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		submit(t, globex, "ax.submit.p1.globex.echo.t-globex-later", "t-globex-later", nil, map[string]string{streams.HeaderRunAt: later})
		waitState(t, operator, "t-globex-later", kv.StatePending)
		var reply admin.TaskReply
		require.Error(t, callAdmin(acme, admin.VerbTaskCancel, admin.TaskRequest{ID: "t-globex-later"}, &reply))
		acme.requireViolation(t, "Publish", "ax.admin.task.cancel")
		require.NoError(t, acme.nc.Publish("$KV.AX_TASKS.t-globex-later", []byte(`{"state":"CANCELLED"}`)))
		acme.requireViolation(t, "Publish", "$KV.AX_TASKS.t-globex-later")
		require.NoError(t, acme.nc.Publish("$JS.API.STREAM.PURGE.AX_DELAYED", nil))
		acme.requireViolation(t, "Publish", "$JS.API.STREAM.PURGE.AX_DELAYED")
		require.Equal(t, kv.StatePending, waitState(t, operator, "t-globex-later", kv.StatePending).State)
	})
	t.Run("cannot replace the other tenant's task", func(t *testing.T) {
		// Issue 13.1: at 54cd21a acme's message with the Ax-Task-Id of a
		// globex task ran as that task. Internal headers are now honoured
		// only on control-plane copies (ax.p<N>.….ctl, scheduler role only).
		later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		submit(t, globex, "ax.submit.p3.globex.echo.victim", "victim", []byte("globex-real"), map[string]string{streams.HeaderRunAt: later})
		waitState(t, operator, "victim", kv.StatePending)
		submit(t, acme, "ax.submit.p0.acme.echo.atk", "atk-1", []byte("EVIL"), map[string]string{
			streams.HeaderTaskID: "victim", streams.HeaderGen: "7"})
		// The forged message is consumed (run, dropped or dead-lettered)...
		require.Eventually(t, func() bool {
			s, err := operator.js.Stream(ctx, "AX_P0")
			return err == nil && s.CachedInfo().State.Msgs == 0
		}, 30*time.Second, 100*time.Millisecond)
		// ...but never as globex's task: the victim waits for its time with
		// its own tenant, and no handler ran EVIL as the victim.
		var reply admin.TaskReply
		require.NoError(t, callAdmin(operator, admin.VerbTaskGet, admin.TaskRequest{ID: "victim"}, &reply))
		require.Equal(t, kv.StatePending, reply.Task.State)
		require.Equal(t, "globex", reply.Task.Tenant)
		for {
			select {
			case task := <-m.ran:
				require.False(t, task.ID == "victim", "acme's payload %q ran as globex's task victim", task.Payload)
				continue
			default:
			}
			break
		}
	})
}

// The streams a producer can fill are bounded in bytes below the shipped
// account limit, so that what they hold can never take the storage the task
// records and leases need.
func TestStreamsBoundedUnderTheAccountLimit(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, nil)
	ctx := context.Background()
	account, err := m.control.js.AccountInfo(ctx)
	require.NoError(t, err)
	require.Positive(t, account.Limits.MaxStore, "the shipped account has a storage limit")
	var reserved int64
	for _, name := range []string{"AX_P0", "AX_P1", "AX_P2", "AX_P3", "AX_P4", "AX_DLQ", "AX_DELAYED", "AX_WORKFLOWS", "AX_TRAIL"} {
		s, err := m.control.js.Stream(ctx, name)
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		require.Positive(t, cfg.MaxBytes, "%s has no MaxBytes", name)
		if name != "AX_TRAIL" { // the trail is written by workers only
			require.Positive(t, cfg.MaxMsgSize, "%s has no MaxMsgSize", name)
		}
		reserved += cfg.MaxBytes
	}
	require.LessOrEqual(t, reserved, account.Limits.MaxStore/2,
		"the bounded streams leave at least half of the account to the KV buckets")
}

// A producer flooding a bucket is refused at the bucket's byte limit, and
// an oversized message at once, while the mesh keeps running: records and
// leases are still written and new tasks still run.
func TestFloodingProducerIsRefused(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, &streams.Config{BucketMaxBytes: 256 << 10, MaxMsgSize: 8 << 10})
	ctx := context.Background()
	service := connectAs(t, m.srv, "service")
	operator := connectAs(t, m.srv, "operator")

	big := nats.NewMsg("ax.submit.p4.acme.echo.big")
	big.Data = make([]byte, 16<<10)
	big.Header.Set(streams.HeaderMsgID, "big")
	_, err := service.js.PublishMsg(ctx, big)
	require.Error(t, err, "a message over MaxMsgSize is refused")

	// The worker's two slots hold two tasks; the rest stays in AX_P4 until
	// the bucket refuses.
	payload := make([]byte, 6<<10)
	refused := 0
	var sent int
	for sent = range 200 {
		msg := nats.NewMsg(fmt.Sprintf("ax.submit.p4.acme.hold.f%d", sent))
		msg.Data = payload
		msg.Header.Set(streams.HeaderMsgID, fmt.Sprintf("flood-%d", sent))
		if _, err := service.js.PublishMsg(ctx, msg); err != nil {
			var apiErr *jetstream.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, jetstream.ErrorCode(10077), apiErr.ErrorCode, "maximum bytes exceeded: %v", err)
			require.Contains(t, err.Error(), "maximum bytes exceeded")
			refused++
			if refused == 5 {
				break
			}
		}
	}
	require.Equal(t, 5, refused, "the flood is refused")
	require.Less(t, sent, 100, "refused near 256 KiB (about 40 messages of 6 KiB)")

	// Records and leases are still written: the worker's membership lease
	// renews, the control plane takes a lease, a task of another bucket is
	// recorded and the flood drains once its handlers end.
	lease, err := kv.NewLease(ctx, m.control.js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "flood-test", Holder: "t", TTL: 5 * time.Second})
	require.NoError(t, err)
	_, err = lease.Acquire(ctx)
	require.NoError(t, err, "a lease is written while the bucket is full")
	submit(t, service, "ax.submit.p1.acme.echo.after-flood", "after-flood", nil, nil)
	close(m.release)
	waitState(t, operator, "after-flood", kv.StateSucceeded)
	require.Eventually(t, func() bool {
		s, err := operator.js.Stream(ctx, "AX_P4")
		return err == nil && s.CachedInfo().State.Msgs == 0
	}, 60*time.Second, 200*time.Millisecond, "the flood drains")
}
