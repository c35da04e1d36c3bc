package kv_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, target, kind, value string
		pause, bad                bool
	}{
		{name: "type", target: "email", kind: "type", value: "email"},
		{name: "tenant", target: "tenant:acme", kind: "tenant", value: "acme"},
		{name: "key pattern", target: "key:order-*", kind: "key", value: "order-*"},
		{name: "pause of a key", target: "key:order-*", pause: true, bad: true},
		{name: "empty tenant", target: "tenant:", bad: true},
		{name: "dotted type", target: "a.b", bad: true},
		{name: "wildcard type", target: "em*", bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kind, value, err := kv.ParseTarget(c.target, c.pause)
			if c.bad {
				require.ErrorIs(t, err, kv.ErrBadTarget)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.kind, kind)
			require.Equal(t, c.value, value)
		})
	}
}

func TestMatchKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, key string
		match        bool
	}{
		{"order-*", "order-42", true},
		{"order-*", "order-", true},
		{"order-*", "invoice-1", false},
		{"*-eu", "acme-eu", true},
		{"*-eu", "acme-us", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"*", "", true},
	}
	for _, c := range cases {
		t.Run(c.pattern+"/"+c.key, func(t *testing.T) {
			require.Equal(t, c.match, kv.MatchKey(c.pattern, c.key))
		})
	}
}

// Of concurrent acquirers exactly n get a slot; a released slot is taken
// again; a slot whose holder stops renewing it expires after its TTL; a
// renewed one does not.
func TestLimitSlots(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	use, err := kv.NewLimitUse(ctx, js, streams.Names{})
	require.NoError(t, err)

	var got atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			ok, err := use.Acquire(ctx, "partner", 5, fmt.Sprintf("w/%d", i), time.Minute)
			require.NoError(t, err)
			if ok {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(5), got.Load())
	n, err := use.InUse(ctx, "partner")
	require.NoError(t, err)
	require.Equal(t, 5, n)

	ok, err := use.Acquire(ctx, "ttl", 1, "dead", 2*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = use.Acquire(ctx, "ttl", 1, "live", 2*time.Second)
	require.NoError(t, err)
	require.False(t, ok, "the slot is held")
	time.Sleep(2100 * time.Millisecond)
	ok, err = use.Acquire(ctx, "ttl", 1, "live", 2*time.Second)
	require.NoError(t, err)
	require.True(t, ok, "the unrenewed slot expired")
	for range 3 {
		time.Sleep(time.Second)
		lost, err := use.Renew(ctx, "ttl", []string{"live"}, 2*time.Second)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
	ok, err = use.Acquire(ctx, "ttl", 1, "other", 2*time.Second)
	require.NoError(t, err)
	require.False(t, ok, "a renewed slot is held")
	require.NoError(t, use.Release(ctx, "ttl", "live"))
	ok, err = use.Acquire(ctx, "ttl", 1, "other", 2*time.Second)
	require.NoError(t, err)
	require.True(t, ok, "a released slot is free")
}

// AcquireSome takes the free slots, up to one per holder, in the holders'
// order, and never more than the limit, however many ask at once.
func TestLimitSlotsTakenSome(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	use, err := kv.NewLimitUse(ctx, js, streams.Names{})
	require.NoError(t, err)
	got, err := use.AcquireSome(ctx, "partner", 5, []string{"a/1", "a/2"}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a/1", "a/2"}, got)
	var taken atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			holders := []string{fmt.Sprintf("w%d/1", i), fmt.Sprintf("w%d/2", i)}
			got, err := use.AcquireSome(ctx, "partner", 5, holders, time.Minute)
			require.NoError(t, err)
			require.Equal(t, holders[:len(got)], got, "the first holders get the slots")
			taken.Add(int64(len(got)))
		})
	}
	wg.Wait()
	require.Equal(t, int64(3), taken.Load())
	n, err := use.InUse(ctx, "partner")
	require.NoError(t, err)
	require.Equal(t, 5, n)
	got, err = use.AcquireSome(ctx, "partner", 5, []string{"late/1"}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, got, "all held")
	got, err = use.AcquireSome(ctx, "partner", 3, []string{"lowered/1"}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, got, "more held than a lowered limit")
}

// A token bucket gives its burst at once, then the rate.
func TestLimitTokens(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	use, err := kv.NewLimitUse(ctx, js, streams.Names{})
	require.NoError(t, err)
	for range 4 {
		wait, err := use.Take(ctx, "sms", 10, 4, "")
		require.NoError(t, err)
		require.Zero(t, wait)
	}
	wait, err := use.Take(ctx, "sms", 10, 4, "")
	require.NoError(t, err)
	require.Positive(t, wait)
	require.LessOrEqual(t, wait, 100*time.Millisecond)
	time.Sleep(wait)
	wait, err = use.Take(ctx, "sms", 10, 4, "")
	require.NoError(t, err)
	require.Zero(t, wait)
}

// A reservation promises a token to one holder: no other is admitted for
// it while it lasts, the holder takes it, and a dropped or expired one
// frees it. Fails without reservations: the second Reserve gets the token
// the first was promised.
func TestLimitTokenReservations(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	use, err := kv.NewLimitUse(ctx, js, streams.Names{})
	require.NoError(t, err)
	const rate = 0.5 // a token every 2 s: none comes back during the test
	wait, err := use.Reserve(ctx, "sms", rate, 1, "a", time.Minute)
	require.NoError(t, err)
	require.Zero(t, wait)
	wait, err = use.Reserve(ctx, "sms", rate, 1, "b", time.Minute)
	require.NoError(t, err)
	require.Positive(t, wait, "the one token is promised to a")
	require.NoError(t, use.Unreserve(ctx, "sms", "a"))
	wait, err = use.Reserve(ctx, "sms", rate, 1, "b", 300*time.Millisecond)
	require.NoError(t, err)
	require.Zero(t, wait, "a's reservation dropped")
	wait, err = use.Take(ctx, "sms", rate, 1, "b")
	require.NoError(t, err)
	require.Zero(t, wait, "b takes its token")
	tokens, err := use.Tokens(ctx, "sms", rate, 1)
	require.NoError(t, err)
	require.Less(t, tokens, 1.0)

	// An expired reservation frees its token.
	time.Sleep(2100 * time.Millisecond)
	wait, err = use.Reserve(ctx, "sms", rate, 1, "c", 200*time.Millisecond)
	require.NoError(t, err)
	require.Zero(t, wait)
	time.Sleep(300 * time.Millisecond)
	wait, err = use.Reserve(ctx, "sms", rate, 1, "d", time.Minute)
	require.NoError(t, err)
	require.Zero(t, wait, "c's reservation expired")
}
