package admin_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// limit.set validates weights: negative, above MaxWeight, on a key pattern
// (alone or with a concurrency), a burst without a rate beside a weight;
// a weight on a type and on a tenant, alone or with bounds, is accepted
// and listed.
func TestAttackLimitSetWeights(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	for _, c := range []struct {
		target string
		limit  kv.Limit
		want   string
	}{
		{"tenant:acme", kv.Limit{Weight: -1}, "weight -1"},
		{"tenant:acme", kv.Limit{Concurrency: 2, Weight: -5}, "weight -5"},
		{"email", kv.Limit{Weight: kv.MaxWeight + 1}, "weight 1001"},
		{"key:order-*", kv.Limit{Weight: 2}, "not of a key pattern"},
		{"key:order-*", kv.Limit{Rate: 3, Weight: 1}, "not of a key pattern"},
		{"tenant:acme", kv.Limit{Burst: 2, Weight: 2}, "a burst needs a rate"},
		{"tenant:", kv.Limit{Weight: 2}, "bad limit target"},
	} {
		_, err := b.api.SetLimit(ctx, c.target, c.limit)
		requireCode(t, err, admin.CodeBadRequest, c.want)
	}
	_, err := b.api.SetLimit(ctx, "email", kv.Limit{Weight: kv.MaxWeight})
	require.NoError(t, err)
	_, err = b.api.SetLimit(ctx, "tenant:acme", kv.Limit{Concurrency: 2, Weight: 3})
	require.NoError(t, err)
	list, err := b.api.Limits(ctx)
	require.NoError(t, err)
	require.Len(t, list.Limits, 2)
	require.Equal(t, kv.Limit{Weight: kv.MaxWeight}, list.Limits[0].Limit)
	require.Equal(t, kv.Limit{Concurrency: 2, Weight: 3}, list.Limits[1].Limit)
	// A set replaces: the weight goes when not given again.
	_, err = b.api.SetLimit(ctx, "tenant:acme", kv.Limit{Concurrency: 2})
	require.NoError(t, err)
	list, err = b.api.Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, kv.Limit{Concurrency: 2}, list.Limits[1].Limit)
}
