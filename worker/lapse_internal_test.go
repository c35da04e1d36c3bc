package worker

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A claim observed past its lapse is lapsed for good: the first heartbeat
// round after a freeze neither sends for it nor moves its last beat (the
// old loop sent an in-progress, had it confirmed and moved lastBeat
// forward, reviving the claim), and a final write for it writes nothing.
func TestLapseIsSticky(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, &streams.Config{AckWait: 3 * time.Second, PriorityPolicy: "none"})
	w, err := New(ctx, js, &Config{Registry: NewRegistry(), Shards: []int{0}, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, w.bindShards(ctx))
	require.Equal(t, 3*time.Second, w.cfg.AckWait, "adopted from the consumers")

	key := ""
	for i := 0; key == ""; i++ {
		if k := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26)); streams.Shard(k) == 0 {
			key = k
		}
	}
	names := streams.DefaultNames()
	_, err = js.Publish(ctx, names.SubmitSubject(2, "acme", "job", key), nil)
	require.NoError(t, err)
	cons, err := js.Consumer(ctx, names.PriorityStream(2), names.ConsumerName(2, 0))
	require.NoError(t, err)
	batch, err := cons.Fetch(1)
	require.NoError(t, err)
	msg := <-batch.Messages()
	require.NotNil(t, msg)
	meta, err := msg.Metadata()
	require.NoError(t, err)

	lapse := w.lapse()
	frozen := time.Now().Add(-lapse - time.Second) // its last beat, before a freeze longer than the lapse
	d := &delivery{msg: msg, meta: meta, lastBeat: frozen}
	w.held.add(d)
	w.beat(time.Now(), w.cfg.AckWait/3) // the first round after the freeze
	d.mu.Lock()
	require.Equal(t, frozen, d.lastBeat, "not revived")
	require.True(t, d.lapsed)
	d.mu.Unlock()
	require.False(t, d.alive(lapse))

	// A final write for the lapsed claim writes nothing.
	rec, rev, err := w.store.Create(ctx, &kv.Record{ID: "t-sticky", Type: "job", Tenant: "acme", Key: key, Priority: 2,
		State: kv.StateRunning, Attempt: 1, MaxAttempts: 3, Worker: w.cfg.ID}, kv.Actor{Worker: w.cfg.ID, Action: "claim"})
	require.NoError(t, err)
	w.succeed(d, &envelope{id: rec.ID, ref: rec.Ref()}, rec, rev, nil)
	got, gotRev, err := w.store.Get(ctx, rec.Ref())
	require.NoError(t, err)
	require.Equal(t, kv.StateRunning, got.State)
	require.Equal(t, rev, gotRev)
	require.Equal(t, int64(1), w.stats.Dropped.Load())
}
