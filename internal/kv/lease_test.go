package kv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func newLease(t *testing.T, b *testBundle, holder string, ttl time.Duration) *kv.Lease {
	t.Helper()
	l, err := kv.NewLease(context.Background(), b.js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "lock.test", Holder: holder, TTL: ttl})
	require.NoError(t, err)
	return l
}

// Two contenders never both hold the lease, over 1,000 rounds with random
// pauses between acquiring, renewing and releasing.
func TestLeaseMutualExclusion(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	var holding atomic.Int32
	var acquired atomic.Int32
	var rounds atomic.Int32
	var wg sync.WaitGroup
	pause := func() { time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) }
	for c := range 2 {
		l := newLease(t, b, fmt.Sprintf("c%d", c), 10*time.Second)
		wg.Go(func() {
			for rounds.Add(1) <= 1000 {
				pause()
				_, err := l.Acquire(ctx)
				if errors.Is(err, kv.ErrLeaseHeld) {
					continue
				}
				if !assertNoErr(t, err) {
					return
				}
				acquired.Add(1)
				if n := holding.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				pause()
				_, err = l.Renew(ctx)
				assertNoErr(t, err)
				pause()
				holding.Add(-1)
				assertNoErr(t, l.Release(ctx))
			}
		})
	}
	wg.Wait()
	require.Greater(t, acquired.Load(), int32(100), "the contenders must actually take turns")
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// A holder paused past its TTL cannot renew or release its successor's lease.
func TestLeasePausedHolderIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	old := newLease(t, b, "old", time.Second)
	next := newLease(t, b, "next", time.Second)
	oldRev, err := old.Acquire(ctx)
	require.NoError(t, err)
	_, err = next.Acquire(ctx)
	require.ErrorIs(t, err, kv.ErrLeaseHeld)
	require.ErrorContains(t, err, "old")

	// "old" pauses; its key expires and "next" takes over.
	var nextRev uint64
	require.Eventually(t, func() bool {
		nextRev, err = next.Acquire(ctx)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Greater(t, nextRev, oldRev, "the fencing token grows")

	_, err = old.Renew(ctx)
	require.ErrorIs(t, err, kv.ErrLeaseLost)
	require.ErrorIs(t, old.Release(ctx), kv.ErrLeaseLost)
	cur, err := next.Current(ctx)
	require.NoError(t, err)
	require.Equal(t, "next", cur.Holder, "the successor's lease is untouched")
	_, err = next.Renew(ctx)
	require.NoError(t, err)
	require.NoError(t, next.Release(ctx))
}

// Hold renews in the background and keeps the lease past several TTLs;
// a holder cut off from the bucket stops guarding before its TTL is over.
func TestLeaseHold(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	l, err := kv.NewLease(ctx, b.js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "lock.hold", Holder: "a", TTL: time.Second, RenewEvery: 300 * time.Millisecond})
	require.NoError(t, err)
	guarded, release, err := l.Hold(ctx)
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond)
	require.NoError(t, guarded.Err(), "renewals keep the lease")
	other, err := kv.NewLease(ctx, b.js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "lock.hold", Holder: "b", TTL: time.Second})
	require.NoError(t, err)
	_, err = other.Acquire(ctx)
	require.ErrorIs(t, err, kv.ErrLeaseHeld)
	release()
	require.ErrorIs(t, context.Cause(guarded), context.Canceled)
	_, err = other.Acquire(ctx)
	require.NoError(t, err, "release frees the lease at once")

	// Taken over behind the holder's back: Hold reports the loss.
	guarded2, release2, err := l.Hold(ctx)
	require.ErrorIs(t, err, kv.ErrLeaseHeld)
	require.Nil(t, guarded2)
	require.Nil(t, release2)
}

// A holder cut off from NATS stops guarding before its lease can expire.
func TestLeaseHoldStopsBeforeTTLWhenCutOff(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	ttl := 2 * time.Second
	l, err := kv.NewLease(ctx, js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "leader", Holder: "a", TTL: ttl, RenewEvery: 500 * time.Millisecond})
	require.NoError(t, err)
	guarded, release, err := l.Hold(ctx)
	require.NoError(t, err)
	defer release()
	time.Sleep(time.Second)
	srv.Stop()
	cutOff := time.Now() // no renewal can succeed after this
	select {
	case <-guarded.Done():
		require.ErrorIs(t, context.Cause(guarded), kv.ErrLeaseLost)
		require.Less(t, time.Since(cutOff), ttl, "the guarded work must stop before the lease can expire")
	case <-time.After(2 * ttl):
		t.Fatal("holder kept guarding after losing the bucket")
	}
}

// Issue 12.6: Held is a synchronous check on the local clock. It turns
// false once TTL minus the margin has passed since the last confirmed
// write, before the server expires the key, and stays false: a renewal
// attempted after the lapse is refused (ErrLeaseLost) rather than reviving
// the hold, as a holder frozen past its lease would attempt when it wakes.
func TestLeaseHeldLapsesAndStaysLapsed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	l, err := kv.NewLease(ctx, b.js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "lock.held", Holder: "a", TTL: time.Second, RenewEvery: 400 * time.Millisecond})
	require.NoError(t, err)
	require.False(t, l.Held(), "not held before an acquire")
	_, err = l.Acquire(ctx)
	require.NoError(t, err)
	require.True(t, l.Held())
	renewed := time.Now()
	_, err = l.Renew(ctx)
	require.NoError(t, err)
	require.True(t, l.Held())
	require.Eventually(t, func() bool { return !l.Held() }, 5*time.Second, time.Millisecond)
	require.Less(t, time.Since(renewed), time.Second, "lapsed before the TTL of its last renewal ran out")
	_, err = l.Renew(ctx)
	require.ErrorIs(t, err, kv.ErrLeaseLost)
	require.False(t, l.Held(), "sticky: no renewal revives a lapsed hold")
	// The key is still ours on the server until its TTL: release deletes it.
	require.NoError(t, l.Release(ctx))
	_, err = l.Acquire(ctx)
	require.NoError(t, err)
	require.True(t, l.Held(), "a new acquire starts a new hold")
}

// TestReleasedLeaseLeavesTheListing: a released lease's key, and a key
// removed with kv.DeleteKey (a cron job), leave the bucket's subjects once
// their markers expire, as an expired lease's does; a plain delete's marker
// stayed for good, and every listing of the members read one more key per
// worker that ever stopped.
func TestReleasedLeaseLeavesTheListing(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "RELEASED", History: 1, LimitMarkerTTL: time.Second})
	require.NoError(t, err)
	for _, holder := range []string{"a", "b", "c"} {
		l, err := kv.NewLease(ctx, js, &kv.LeaseConfig{Bucket: "RELEASED", Key: holder, Holder: holder, TTL: time.Minute})
		require.NoError(t, err)
		_, err = l.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		_, err = l.Acquire(ctx) // the key can be taken again at once
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	bucket, err := js.KeyValue(ctx, "RELEASED")
	require.NoError(t, err)
	rev, err := bucket.Create(ctx, "cron.job", []byte("{}"))
	require.NoError(t, err)
	require.NoError(t, kv.DeleteKey(ctx, bucket, "cron.job", rev))
	require.Eventually(t, func() bool {
		keys, err := kv.ListKeys(ctx, js, "RELEASED", "")
		return err == nil && len(keys) == 0
	}, 10*time.Second, 100*time.Millisecond)
}

// publishReplyOnto makes the server write a publish acknowledgement onto
// key of bucket, the way a producer of the single-account deployment can:
// a JetStream publish whose reply subject names the key (with msgID twice:
// the duplicate's acknowledgement, {"stream":…,"seq":…,"duplicate": true}).
func publishReplyOnto(t *testing.T, nc *nats.Conn, js jetstream.JetStream, bucket, key, msgID string) {
	t.Helper()
	ctx := context.Background()
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}})
	require.NoError(t, err)
	for range 1 + min(len(msgID), 1) {
		msg := nats.NewMsg("probe.x")
		msg.Reply = kv.KeySubject(bucket, key)
		if msgID != "" {
			msg.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		require.NoError(t, nc.PublishMsg(msg))
	}
	require.NoError(t, nc.Flush())
}

// A lease key holding a value ax did not write (a publish acknowledgement
// the server sent there, which has no per-key TTL and never expires) is
// taken over once a contender saw it unchanged for a lease period, and not
// before; the takeover is reported. Before the fix the key was held for
// good ("acquire lease AX_LOCKS/leader: lease held by another holder: ").
func TestLeaseTakesOverAForeignValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, msgID, want string }{
		{"ack", "", `"seq":1`},
		{"duplicate ack", "dup", `"duplicate": true`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nc, js := natstest.RunServer(t)
			natstest.Provision(t, js, nil)
			ctx := context.Background()
			publishReplyOnto(t, nc, js, "AX_LOCKS", "leader", c.msgID)
			locks, err := js.KeyValue(ctx, "AX_LOCKS")
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				e, err := locks.Get(ctx, "leader")
				return err == nil && strings.Contains(string(e.Value()), c.want)
			}, 5*time.Second, 10*time.Millisecond, "the server wrote its ack onto the key")

			var took []kv.TakenOver
			l, err := kv.NewLease(ctx, js, &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "leader", Holder: "s1", TTL: time.Second,
				TakeOverFunc: func(prev kv.TakenOver) { took = append(took, prev) }})
			require.NoError(t, err)
			first := time.Now()
			_, err = l.Acquire(ctx)
			require.ErrorIs(t, err, kv.ErrLeaseHeld)
			require.ErrorContains(t, err, "a value ax did not write")
			_, err = l.Current(ctx)
			require.ErrorContains(t, err, "holds a value ax did not write")
			require.Eventually(t, func() bool {
				_, err := l.Acquire(ctx)
				return err == nil
			}, 5*time.Second, 20*time.Millisecond)
			require.GreaterOrEqual(t, time.Since(first), time.Second, "not before a lease period")
			require.Len(t, took, 1)
			require.True(t, took[0].Foreign)
			require.Contains(t, string(took[0].Value), c.want)
			cur, err := l.Current(ctx)
			require.NoError(t, err)
			require.Equal(t, "s1", cur.Holder)
			_, err = l.Renew(ctx)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		})
	}
}

// A holder that renews is never taken over, however long a contender
// tries; one that stops renewing is, within a lease period of the
// contender's first sight of its last write, even where its key would not
// expire.
func TestLeaseTakeOverSparesARenewingHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	cfg := func(holder string) *kv.LeaseConfig {
		return &kv.LeaseConfig{Bucket: "AX_LOCKS", Key: "lock.renewing", Holder: holder, TTL: time.Second, RenewEvery: 300 * time.Millisecond}
	}
	a, err := kv.NewLease(ctx, b.js, cfg("a"))
	require.NoError(t, err)
	guarded, release, err := a.Hold(ctx)
	require.NoError(t, err)
	defer release()
	other, err := kv.NewLease(ctx, b.js, cfg("b"))
	require.NoError(t, err)
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		_, err := other.Acquire(ctx)
		require.ErrorIs(t, err, kv.ErrLeaseHeld)
		require.ErrorContains(t, err, ": a")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, guarded.Err())
	require.True(t, a.Held())
}
