package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// A value of AX_LIMITS that ax did not write (a publish acknowledgement
// written over the key through a producer's reply subject, or anything
// that does not decode) neither frees the limit nor blocks it for good: a
// concurrency limit's slots are taken again only a TTL after the foreign
// value was stored (its holders, whose renewals now find their slots gone,
// have stopped trusting them by then), and a rate's bucket starts empty at
// that time and refills. Fails before: the acknowledgement decoded as a
// value holding no slot (every slot free at once, beside the holders), and
// a value that did not decode failed every take ("limit_check_failed"
// until an operator deleted the key).
func TestForeignLimitValues(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	use, err := kv.NewLimitUse(ctx, js, streams.Names{})
	require.NoError(t, err)
	bucket, err := js.KeyValue(ctx, streams.Names{}.LimitsBucket())
	require.NoError(t, err)
	const ttl = 2 * time.Second

	for name, forged := range map[string]string{
		"a publish acknowledgement": `{"stream":"AX_P2","seq":12}`,
		"not JSON":                  `x`,
		"another target's slots":    `{"target":"other","holders":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			target := "partner-" + name
			ok, err := use.Acquire(ctx, target, 1, "old", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			_, err = bucket.Put(ctx, kv.SlotsKey(target), []byte(forged))
			require.NoError(t, err)
			stored := time.Now()

			lost, err := use.Renew(ctx, target, []string{"old"}, time.Minute)
			require.NoError(t, err)
			require.Equal(t, []string{"old"}, lost, "the holder did not learn its slot is gone")
			ok, err = use.Acquire(ctx, target, 1, "new", ttl)
			require.NoError(t, err)
			require.False(t, ok, "a slot was taken right after the overwrite, beside its old holder")
			require.Eventually(t, func() bool {
				ok, err := use.Acquire(ctx, target, 1, "new", ttl)
				require.NoError(t, err)
				return ok
			}, 3*ttl, 50*time.Millisecond, "the limit stayed blocked")
			require.GreaterOrEqual(t, time.Since(stored), ttl-100*time.Millisecond)
			n, err := use.InUse(ctx, target)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		})
	}

	t.Run("a rate's bucket", func(t *testing.T) {
		wait, err := use.Take(ctx, "rated", 2, 5, "")
		require.NoError(t, err)
		require.Zero(t, wait)
		_, err = bucket.Put(ctx, kv.RateKey("rated"), []byte(`{"stream":"AX_P2","seq":13}`))
		require.NoError(t, err)
		wait, err = use.Take(ctx, "rated", 2, 5, "")
		require.NoError(t, err)
		require.Positive(t, wait, "the overwrite refilled the bucket to its burst")
		require.Eventually(t, func() bool {
			wait, err := use.Take(ctx, "rated", 2, 5, "")
			require.NoError(t, err)
			return wait == 0
		}, 3*time.Second, 20*time.Millisecond, "the rate stayed blocked")
	})
}

// The limits key's value decodes only as ax writes it: a publish
// acknowledgement (either shape) is ErrForeignLimits, not "no limit and no
// pause"; ax's own values, the empty one included, decode.
func TestDecodeLimitsRefusesForeignValues(t *testing.T) {
	t.Parallel()
	for _, v := range []string{`{}`, `{"limits":{"email":{"concurrency":2}}}`, `{"paused":{"tenant:acme":{"at":"2026-12-07T00:00:00Z"}}}`} {
		_, err := kv.DecodeLimits([]byte(v))
		require.NoError(t, err, v)
	}
	for _, v := range []string{`{"stream":"AX_P2","seq":12}`, `{"stream":"AX_P2","seq":12,"duplicate": true}`, `x`, ``} {
		_, err := kv.DecodeLimits([]byte(v))
		require.ErrorIs(t, err, kv.ErrForeignLimits, v)
	}
}
