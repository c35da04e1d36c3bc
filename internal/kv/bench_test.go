package kv_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
)

// BenchmarkTransition measures one task's claim and completion (two CAS
// moves) with the trail kept in the record only, and mirrored to AX_TRAIL.
func BenchmarkTransition(b *testing.B) {
	for _, mode := range []struct {
		name   string
		stream bool
	}{{"record-trail", false}, {"record+AX_TRAIL", true}} {
		b.Run(mode.name, func(b *testing.B) {
			bundle := setupB(b, &kv.StoreConfig{TrailStream: mode.stream})
			ctx := context.Background()
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = fmt.Sprintf("t%d", i)
				if _, _, err := bundle.store.Create(ctx, &kv.Record{ID: ids[i], Type: "x", Tenant: "t", Key: ids[i], State: kv.StateReady}, kv.Actor{}); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16) // 32 concurrent tasks on 2 cores, like a busy worker
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := ids[next.Add(1)-1]
					rec, rev, err := bundle.store.Transition(ctx, tref(id), kv.StateReady, kv.StateRunning, kv.Actor{Worker: "w"}, nil)
					if err != nil {
						b.Error(err)
						return
					}
					if _, _, err := bundle.store.Apply(ctx, rec, rev, kv.StateSucceeded, kv.Actor{Worker: "w"}, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}
