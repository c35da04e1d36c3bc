package admin_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// BenchmarkRejectWatchCost publishes valid submits (JetStream,
// acked) with nothing else subscribed ("baseline"), with the leader's
// always-on watch of mistyped subjects subscribed ("watch",
// [streams.Names.RejectWatchSubjects]) and with a sample subscribed to
// every submit subject ("sample", what `ax rejects` does while it runs).
// watch_deliveries/op is the messages the watching connection received per
// valid submit: 0 for the watch, 1 for the sample (the doubling the watch
// avoids).
//
//	go test ./scheduler -run '^$' -bench RejectWatchCost -count 3
func BenchmarkRejectWatchCost(b *testing.B) {
	names := streams.DefaultNames()
	for _, tc := range []struct {
		name     string
		subjects []string
	}{
		{"baseline", nil},
		{"watch", names.RejectWatchSubjects()},
		{"sample", []string{"ax.submit", "ax.submit.>", "ax.core", "ax.core.>"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := natstest.Start(b, natstest.Options{})
			_, js := srv.Connect()
			natstest.Provision(b, js, nil)
			watcher, _ := srv.Connect()
			for _, s := range tc.subjects {
				_, err := watcher.Subscribe(s, func(*nats.Msg) {})
				require.NoError(b, err)
			}
			require.NoError(b, watcher.Flush())
			acked := func() {
				select {
				case <-js.PublishAsyncComplete():
				case <-time.After(time.Minute):
					b.Fatal("publish acks missing")
				}
			}
			i := 0
			for b.Loop() {
				_, err := js.PublishAsync("ax.submit.p1.acme.echo.k"+strconv.Itoa(i%1000), nil)
				require.NoError(b, err)
				if i++; i%256 == 0 { // a window of acks in flight
					acked()
				}
			}
			acked()
			b.StopTimer()
			require.NoError(b, watcher.Flush())
			b.ReportMetric(float64(watcher.Stats().InMsgs)/float64(i), "watch_deliveries/op")
		})
	}
}
