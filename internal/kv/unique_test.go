package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// The claims bucket is provisioned again without error, allows per-key
// TTLs and refuses roll-ups (a producer's `Nats-Rollup: all` on its own key
// would purge every tenant's claims).
func TestProvisionUniqueBucket(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	require.NoError(t, kv.Provision(ctx, js, nil), "idempotent")
	s, err := js.Stream(ctx, "KV_AX_UNIQUE")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	require.True(t, cfg.AllowMsgTTL)
	require.False(t, cfg.AllowRollup)
	require.Equal(t, int64(1), cfg.MaxMsgsPerSubject)
	require.Equal(t, int64(kv.DefaultUniqueMaxBytes), cfg.MaxBytes)

	claims := kv.NewClaims(js, streams.Names{})
	other := kv.ClaimKey("globex", "h1")
	_, err = claims.Create(ctx, other, &kv.Claim{Tenant: "globex", ID: "g"}, time.Hour)
	require.NoError(t, err)
	rollup := nats.NewMsg("$KV.AX_UNIQUE." + kv.ClaimKey("acme", "h1"))
	rollup.Header.Set("Nats-Rollup", "all")
	_, err = js.PublishMsg(ctx, rollup)
	require.ErrorContains(t, err, "rollup")
	_, _, err = claims.Get(ctx, other)
	require.NoError(t, err, "globex's claim stays")
}

// A claim is created once, read back, updated by compare-and-set only,
// released, and expires with its TTL; each time the key is free again a
// create succeeds.
func TestClaims(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	claims := kv.NewClaims(js, streams.Names{})
	key := kv.ClaimKey("café", "abc")
	require.Equal(t, "=Y2Fmw6k.abc", key, "a tenant as in a record key")

	_, _, err := claims.Get(ctx, key)
	require.ErrorIs(t, err, kv.ErrNotFound)
	rev, err := claims.Create(ctx, key, &kv.Claim{Tenant: "café", ID: "t1", Type: "x"}, time.Hour)
	require.NoError(t, err)
	_, err = claims.Create(ctx, key, &kv.Claim{Tenant: "café", ID: "t2"}, time.Hour)
	require.ErrorIs(t, err, kv.ErrClaimed)
	got, gotRev, err := claims.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, rev, gotRev)
	require.Equal(t, "t1", got.ID)

	_, err = claims.Update(ctx, key, &kv.Claim{Tenant: "café", ID: "t2"}, time.Hour, rev+100)
	require.ErrorIs(t, err, kv.ErrConflict)
	rev, err = claims.Update(ctx, key, &kv.Claim{Tenant: "café", ID: "t2", Published: true}, time.Hour, rev)
	require.NoError(t, err)
	require.ErrorIs(t, claims.Release(ctx, key, rev-1), kv.ErrConflict)
	require.NoError(t, claims.Release(ctx, key, rev))
	_, _, err = claims.Get(ctx, key)
	require.ErrorIs(t, err, kv.ErrNotFound, "released")

	_, err = claims.Create(ctx, key, &kv.Claim{Tenant: "café", ID: "t3"}, time.Second)
	require.NoError(t, err, "over the release's marker")
	require.Eventually(t, func() bool {
		_, _, err := claims.Get(ctx, key)
		return err != nil
	}, 5*time.Second, 50*time.Millisecond, "the claim expires with its TTL")
	_, err = claims.Create(ctx, key, &kv.Claim{Tenant: "café", ID: "t4"}, time.Hour)
	require.NoError(t, err, "after the expiry")
}
