package deploy_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// A deployment provisioned with a 3 s ack wait is read back as such by a
// process that only verifies it, and every part it builds takes that ack
// wait, its names and its record store; a config naming others is refused.
func TestOpenReadsWhatProcessesMustAgreeOn(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	store := kv.StoreConfig{Retention: time.Hour}
	provisioned, err := deploy.Open(ctx, js, &deploy.Options{Provision: true, Streams: &streams.Config{AckWait: 3 * time.Second}, Store: store})
	require.NoError(t, err)
	require.NotNil(t, provisioned.Provisioned(), "what provisioning changed")
	require.Contains(t, provisioned.Provisioned().Streams.Created, "stream AX_P0")

	d, err := deploy.Open(ctx, js, &deploy.Options{Store: store})
	require.NoError(t, err)
	require.Nil(t, d.Provisioned(), "only verified")
	require.Equal(t, 3*time.Second, d.AckWait(), "read from the shard consumers, not a default")
	require.Equal(t, "ax", d.Names().Prefix())

	client, err := d.Client(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	ldr, err := d.Leader(ctx, nil)
	require.NoError(t, err)
	_ = ldr
	svc, err := d.Admin(ctx, nil)
	require.NoError(t, err)
	_ = svc
	w, err := d.Worker(ctx, &worker.Config{Registry: worker.NewRegistry()})
	require.NoError(t, err)
	_ = w

	for _, tc := range []struct {
		name string
		open func() error
		want string
	}{
		{"leader ack wait", func() error { _, err := d.Leader(ctx, &scheduler.Config{AckWait: 30 * time.Second}); return err },
			"AckWait 30s, the shard consumers' is 3s"},
		{"worker ack wait", func() error {
			_, err := d.Worker(ctx, &worker.Config{Registry: worker.NewRegistry(), AckWait: time.Minute})
			return err
		}, "AckWait 1m0s, the shard consumers' is 3s"},
		{"client names", func() error {
			names, err := streams.NewNames("other")
			require.NoError(t, err)
			_, err = d.Client(ctx, &ax.Config{Names: names})
			return err
		}, `prefix "other", the deployment's is "ax"`},
		{"admin store", func() error {
			_, err := d.Admin(ctx, &admin.Config{Store: kv.StoreConfig{Retention: 2 * time.Hour}})
			return err
		}, "record store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.open()
			require.ErrorIs(t, err, deploy.ErrMismatch)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// Opening a deployment that was never provisioned, without provisioning
// it, fails and says so.
func TestOpenVerifiesTheDeploymentExists(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	_, err := deploy.Open(context.Background(), js, nil)
	require.ErrorContains(t, err, "priority bucket AX_P0 (provision the deployment first)")
}

// On a pools deployment (no catch-all consumer) the ack wait is read from
// the settings the buckets were provisioned with.
func TestOpenReadsAPoolsDeployment(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := deploy.Open(ctx, js, &deploy.Options{Provision: true, Streams: &streams.Config{Layout: streams.LayoutPools, AckWait: 4 * time.Second}})
	require.NoError(t, err)
	d, err := deploy.Open(ctx, js, nil)
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, d.AckWait())
}

// A fair deployment has no catch-all consumer either: Open reads the
// consumers' settings from the buckets' metadata, and provisioning lists
// the tenants it made consumers for, which a worker then serves.
func TestOpenReadsAFairDeployment(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := deploy.Open(ctx, js, &deploy.Options{Provision: true, Streams: &streams.Config{Layout: streams.LayoutFair, AckWait: 4 * time.Second, Tenants: []string{"acme"}}})
	require.NoError(t, err)
	d, err := deploy.Open(ctx, js, nil)
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, d.AckWait())
	board, err := control.Open(ctx, js, streams.Names{})
	require.NoError(t, err)
	listed, _, err := control.ReadTenants(ctx, board)
	require.NoError(t, err)
	require.Equal(t, []string{"acme"}, listed.Tenants)
}
