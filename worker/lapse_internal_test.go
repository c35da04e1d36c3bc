package worker

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// A claim observed past its lapse is lapsed for good: the first heartbeat
// round after a freeze neither sends for it nor moves its last beat (the
// old loop sent an in-progress, had it confirmed and moved lastBeat
// forward, reviving the claim), and a final write for it writes nothing.
func TestLapseIsSticky(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, js := shardZeroWorker(t)
	require.NoError(t, w.intake.bindShards(ctx))
	require.Equal(t, 3*time.Second, w.cfg.AckWait, "adopted from the consumers")
	msg, key := fetchShardZero(t, js, "job", nil)
	meta, err := msg.Metadata()
	require.NoError(t, err)

	lapse := w.claimer.lapse()
	frozen := time.Now().Add(-lapse - time.Second) // its last beat, before a freeze longer than the lapse
	d := &delivery{msg: msg, meta: meta, lastBeat: frozen}
	w.held.add(d)
	w.claimer.beat(time.Now(), w.cfg.AckWait/3) // the first round after the freeze
	d.mu.Lock()
	require.Equal(t, frozen, d.lastBeat, "not revived")
	require.True(t, d.lapsed)
	d.mu.Unlock()
	require.False(t, d.alive(lapse))

	// A final write for the lapsed claim writes nothing.
	rec, rev, err := w.store.Create(ctx, &kv.Record{ID: "t-sticky", Type: "job", Tenant: "acme", Key: key, Priority: 2,
		State: kv.StateRunning, Attempt: 1, MaxAttempts: 3, Worker: w.cfg.ID}, kv.Actor{Worker: w.cfg.ID, Action: "claim"})
	require.NoError(t, err)
	w.runner.succeed(d, &envelope{id: rec.ID, ref: rec.Ref()}, rec, rev, nil)
	got, gotRev, err := w.store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, kv.StateRunning, got.State)
	require.Equal(t, rev, gotRev)
	require.Equal(t, int64(1), w.stats.Dropped.Load())
}
