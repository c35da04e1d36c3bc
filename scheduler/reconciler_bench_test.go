package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// BenchmarkReconcilerPass measures the reconciler at AX_BENCH_RECORDS task
// records (default 100,000): 90 % terminal (SUCCEEDED), 10 % READY at a
// stored message. It reports how long the watch took to index them
// (index-ms, once per leader), the heap's memory (tracked), and the cost of
// one pass: with nothing due (ns/op: what a pass costs at that size while
// the records are healthy and not due) and with a full batch of 1,000 due
// (batch-ms: 1,000 checks of two reads each).
//
//	AX_BENCH_RECORDS=1000000 go test ./scheduler -run '^$' -bench ReconcilerPass -benchtime 2000x
func BenchmarkReconcilerPass(b *testing.B) {
	n := 100_000
	if v := os.Getenv("AX_BENCH_RECORDS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	ctx := context.Background()
	srv := natstest.Start(b, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(b, js, nil)
	const batch = 1000
	for i := range n {
		state, seq := kv.StateSucceeded, uint64(0)
		if i%10 == 0 { // READY at its own stored message
			id := "t" + strconv.Itoa(i)
			msg := nats.NewMsg("ax.submit.p2.t.x." + id)
			msg.Header.Set(streams.HeaderMsgID, id)
			ack, err := js.PublishMsg(ctx, msg)
			require.NoError(b, err)
			state, seq = kv.StateReady, ack.Sequence
		}
		data := fmt.Appendf(nil, `{"id":"t%d","type":"x","tenant":"t","key":"t%d","priority":2,"state":%q,"gen":1,"stream_seq":%d,"trail":[{"task":"t%d","to":"READY","at":"2026-11-30T00:00:00Z","action":"submit"}]}`,
			i, i, state, seq, i)
		for {
			if _, err := js.PublishAsync("$KV.AX_TASKS.t"+strconv.Itoa(i), data); err == nil {
				break
			}
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	store, err := kv.NewStore(ctx, js, nil)
	require.NoError(b, err)
	cfg := (&Config{ReconcileGrace: time.Hour, ReconcileBatch: batch}).withDefaults()
	elector, err := NewElector(ctx, js, &ElectorConfig{})
	require.NoError(b, err)
	l := &Leader{cfg: cfg, js: js, store: store, elector: elector, log: zap.NewNop()}
	r := newReconciler(l)
	w, err := store.Bucket().WatchAll(ctx)
	require.NoError(b, err)
	start := time.Now()
	for entry := range w.Updates() {
		if entry == nil {
			break
		}
		r.index.observe(entry, start)
	}
	indexed := time.Since(start)
	require.NoError(b, w.Stop())
	require.Equal(b, n/10, r.index.len())

	b.ResetTimer()
	for b.Loop() {
		_ = r.pass(ctx, start) // nothing due before start + the grace
	}
	b.StopTimer()
	due := start.Add(2 * time.Hour)
	t0 := time.Now()
	if err := r.pass(ctx, due); err != nil && !errors.Is(err, errNotLeading) { // no lease here: the report is not written
		b.Logf("pass: %v", err)
	}
	b.ReportMetric(float64(time.Since(t0).Milliseconds()), "batch-ms")
	b.ReportMetric(float64(indexed.Milliseconds()), "index-ms")
	b.ReportMetric(float64(r.index.len()), "tracked")
	require.Equal(b, uint64(batch), r.report.Checked, "a pass checks one batch")
	var lost uint64
	for _, v := range r.report.Dead {
		lost += v
	}
	require.Zero(b, lost, "healthy records are never touched")
}
