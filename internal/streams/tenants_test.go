package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fair deployment has no catch-all consumer; each tenant's consumers
// are created on demand (or up front) with the provisioned settings, once;
// it cannot be switched to another layout by provisioning, nor be pools
// too; a tenant's consumer takes only the tenant's tasks.
func TestFairProvisioning(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	cfg := &streams.Config{Layout: streams.LayoutFair, AckWait: 7 * time.Second, Tenants: []string{"acme"}}
	report, err := streams.Provision(ctx, js, cfg)
	require.NoError(t, err)
	require.Contains(t, report.Created, "160 consumers of tenant acme")
	_, err = js.Consumer(ctx, "AX_P0", "p0-s00")
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "no catch-all consumer")
	again, err := streams.Provision(ctx, js, cfg)
	require.NoError(t, err)
	require.Empty(t, again.Created)
	require.Empty(t, again.Updated, "a second run must change nothing")

	stream, err := js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	sc := stream.CachedInfo().Config
	require.Equal(t, streams.LayoutFair, streams.LayoutOf(sc))
	require.NotEqual(t, streams.LayoutPools, streams.LayoutOf(sc))
	require.True(t, streams.LayoutOf(sc).Routed())
	back, err := streams.RoutedConfig(streams.Names{}, sc)
	require.NoError(t, err)
	require.Equal(t, streams.LayoutFair, back.Layout)
	require.Equal(t, 7*time.Second, back.AckWait)

	created, err := streams.EnsureTenantConsumers(ctx, js, back, "globex")
	require.NoError(t, err)
	require.Equal(t, streams.Priorities*streams.Shards, created)
	created, err = streams.EnsureTenantConsumers(ctx, js, back, "globex")
	require.NoError(t, err)
	require.Zero(t, created, "existing consumers are left as they are")
	cons, err := js.Consumer(ctx, "AX_P2", "p2-s05-n-globex")
	require.NoError(t, err)
	cc := cons.CachedInfo().Config
	require.Equal(t, "ax.p2.5.globex.>", cc.FilterSubject)
	require.Equal(t, 7*time.Second, cc.AckWait)

	// The two tenants' consumers of a shard split its tasks.
	for _, subject := range []string{"ax.submit.p2.acme.job.k", "ax.submit.p2.globex.job.k", "ax.submit.p2.globex.job.k"} {
		_, err := js.Publish(ctx, subject, nil)
		require.NoError(t, err)
	}
	shard := streams.Shard("k")
	for tenant, want := range map[string]uint64{"acme": 1, "globex": 2} {
		c, err := js.Consumer(ctx, "AX_P2", streams.Names{}.TenantConsumerName(2, shard, tenant))
		require.NoError(t, err)
		// A consumer counts a stored message a moment after the
		// publish's acknowledgement (seen behind on a loaded machine).
		require.EventuallyWithT(t, func(c2 *assert.CollectT) {
			info, err := c.Info(ctx)
			if assert.NoError(c2, err) {
				assert.Equal(c2, want, info.NumPending, tenant)
			}
		}, 10*time.Second, 20*time.Millisecond)
	}

	_, err = streams.Provision(ctx, js, &streams.Config{})
	require.ErrorIs(t, err, streams.ErrLayoutChange, "a fair deployment stays one")
	_, err = streams.Provision(ctx, js, &streams.Config{Layout: streams.LayoutPools})
	require.ErrorIs(t, err, streams.ErrLayoutChange, "a fair deployment does not become pools")
	_, js2 := natstest.RunServer(t)
	_, err = streams.Provision(ctx, js2, &streams.Config{})
	require.NoError(t, err)
	_, err = streams.Provision(ctx, js2, &streams.Config{Layout: streams.LayoutFair})
	require.ErrorIs(t, err, streams.ErrLayoutChange, "a shared deployment stays one")

	_, err = streams.Provision(ctx, js2, &streams.Config{Layout: "fair+pools"})
	require.ErrorContains(t, err, `layout "fair+pools" is not one of [shared pools fair]`)
	_, err = streams.Provision(ctx, js2, &streams.Config{Tenants: []string{"acme"}})
	require.ErrorContains(t, err, "need Layout fair")
	_, err = streams.Provision(ctx, js2, &streams.Config{Layout: streams.LayoutFair, Tenants: []string{"a.b"}})
	require.Error(t, err)
}

// Tenant names that are not plain consumer-name material are hashed.
func TestTenantConsumerName(t *testing.T) {
	t.Parallel()
	n := streams.Names{}
	require.Equal(t, "p1-s03-n-acme_2", n.TenantConsumerName(1, 3, "acme_2"))
	odd := n.TenantConsumerName(1, 3, "acme:eu")
	require.Regexp(t, `^p1-s03-n-h[0-9a-f]{24}$`, odd)
	require.NotEqual(t, odd, n.TenantConsumerName(1, 3, "acme:us"))
}
