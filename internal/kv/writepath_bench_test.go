package kv_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompareAndSetWrite prices one record write (a compare-and-set
// publish) from 64 goroutines: a synchronous request each, against an
// asynchronous publish each awaited by its goroutine. The CPU figure is
// the whole process (server included) per write.
func BenchmarkCompareAndSetWrite(b *testing.B) {
	for _, mode := range []string{"sync", "async"} {
		b.Run(mode, func(b *testing.B) {
			_, js := natstest.RunServer(b)
			ctx := context.Background()
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "W", History: 1, LimitMarkerTTL: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			val := make([]byte, 400)
			revs := make([]uint64, 64)
			var next atomic.Int64
			var wg sync.WaitGroup
			c0 := cpuTime()
			b.ResetTimer()
			for g := range 64 {
				wg.Go(func() {
					subj := fmt.Sprintf("$KV.W.k%d", g)
					for next.Add(1) <= int64(b.N) {
						m := nats.NewMsg(subj)
						m.Data = val
						m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(revs[g], 10))
						if mode == "sync" {
							ack, err := js.PublishMsg(ctx, m)
							if err != nil {
								b.Error(err)
								return
							}
							revs[g] = ack.Sequence
							continue
						}
						f, err := js.PublishMsgAsync(m)
						if err != nil {
							b.Error(err)
							return
						}
						select {
						case ack := <-f.Ok():
							revs[g] = ack.Sequence
						case err := <-f.Err():
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
