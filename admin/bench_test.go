package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
)

// BenchmarkAdminTaskGet measures one task.get round trip through the micro
// service (request, KV get, JSON reply).
func BenchmarkAdminTaskGet(b *testing.B) {
	bundle := setupAdmin(b)
	info, err := bundle.Client.Submit(context.Background(), ax.TaskSpec{Type: "email"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		var reply admin.TaskReply
		if err := bundle.api.Call(ctx, admin.VerbTaskGet, admin.TaskRequest{ID: info.ID}, &reply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdminStats measures stats over 5,000 records (one scan of the
// task bucket plus 5 stream infos and consumer lists); it reports records/s.
func BenchmarkAdminStats(b *testing.B) {
	bundle := setupAdmin(b)
	const records = 5_000
	tasks := make([]ax.TaskSpec, records)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{ID: fmt.Sprintf("t-%d", i), Type: "email", Priority: ax.PriorityOf(i % 5)}
	}
	if _, err := bundle.Client.SubmitBatch(context.Background(), tasks); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		var reply admin.StatsReply
		if err := bundle.api.Call(ctx, admin.VerbStats, nil, &reply); err != nil {
			b.Fatal(err)
		}
		if reply.Records != records {
			b.Fatalf("stats saw %d records, want %d", reply.Records, records)
		}
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
}
