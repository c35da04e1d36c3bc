// Command atomicbatch prices compare-and-set record writes on a KV-shaped
// stream of a separate server: pipelined one by one (-b 0) against
// JetStream atomic batches of -b writes, four batches in flight, each
// write with a per-message TTL and an expected last subject sequence as
// ax's record moves carry. It prints writes per second and the CPU per
// write of this process and of the server (-pid). Used to price a group
// commit of the worker's outcome writes (docs/decisions/task-path-cost.md):
//
//	ax server --listen 127.0.0.1:4333 --data /tmp/p [--sync always] &
//	go run ./internal/bench/pricing/atomicbatch -pid $! -b 16
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

func main() {
	url := flag.String("s", "nats://127.0.0.1:4333", "server URL")
	n := flag.Int("n", 20000, "writes")
	b := flag.Int("b", 0, "batch size (0: pipelined single writes)")
	pid := flag.Int("pid", 0, "server pid")
	flag.Parse()
	ctx := context.Background()
	nc, err := nats.Connect(*url)
	if err != nil {
		panic(err)
	}
	js, _ := jetstream.New(nc)
	name := "KV_price" + strconv.Itoa(*b)
	_ = js.DeleteStream(ctx, name)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"$KV.price" + strconv.Itoa(*b) + ".>"}, MaxMsgsPerSubject: 1, AllowAtomicPublish: true, AllowMsgTTL: true, AllowDirect: true, Discard: jetstream.DiscardNew})
	if err != nil {
		panic(err)
	}
	subj := func(i int) string { return "$KV.price" + strconv.Itoa(*b) + ".k" + strconv.Itoa(i) }
	data := make([]byte, 400)
	rev := make([]uint64, *n)
	// creates, pipelined
	var futs []jetstream.PubAckFuture
	for i := 0; i < *n; i++ {
		f, err := js.PublishAsync(subj(i), data, jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil {
			panic(err)
		}
		futs = append(futs, f)
		if len(futs)%2000 == 0 {
			<-js.PublishAsyncComplete()
		}
	}
	for i, f := range futs {
		select {
		case a := <-f.Ok():
			rev[i] = a.Sequence
		case e := <-f.Err():
			panic(e)
		}
	}
	c0, s0, t0 := bench.SelfCPU(), bench.ProcCPU(*pid), time.Now()
	if *b == 0 {
		futs = futs[:0]
		for i := 0; i < *n; i++ {
			m := nats.NewMsg(subj(i))
			m.Data = data
			m.Header.Set("Nats-TTL", "1h")
			f, err := js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(rev[i]))
			if err != nil {
				panic(err)
			}
			futs = append(futs, f)
			if len(futs)%2000 == 0 {
				<-js.PublishAsyncComplete()
			}
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case e := <-f.Err():
				panic(e)
			}
		}
	} else {
		// several batches in flight at once (as several slots' outcomes)
		inflight := 4
		sem := make(chan struct{}, inflight)
		done := make(chan error, *n / *b + 1)
		nb := 0
		for i := 0; i < *n; i += *b {
			j := min(i+*b, *n)
			sem <- struct{}{}
			nb++
			go func(i, j int) {
				defer func() { <-sem }()
				id := nuid.Next()
				for k := i; k < j; k++ {
					m := nats.NewMsg(subj(k))
					m.Data = data
					m.Header.Set("Nats-TTL", "1h")
					m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(rev[k], 10))
					m.Header.Set("Nats-Batch-Id", id)
					m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(k-i+1))
					if k == j-1 {
						m.Header.Set("Nats-Batch-Commit", "1")
						r, err := nc.RequestMsg(m, 10*time.Second)
						if err != nil {
							done <- err
							return
						}
						if len(r.Data) > 0 && r.Data[2] == 'e' {
							done <- fmt.Errorf("%s", r.Data)
							return
						}
						done <- nil
						return
					}
					if err := nc.PublishMsg(m); err != nil {
						done <- err
						return
					}
				}
			}(i, j)
		}
		for k := 0; k < nb; k++ {
			if err := <-done; err != nil {
				panic(err)
			}
		}
	}
	el := time.Since(t0)
	c1, s1 := bench.SelfCPU(), bench.ProcCPU(*pid)
	fmt.Printf("batch=%d n=%d writes/s=%.0f client_us=%.1f server_us=%.1f\n", *b, *n, float64(*n)/el.Seconds(),
		float64((c1-c0).Microseconds())/float64(*n), float64((s1-s0).Microseconds())/float64(*n))
	_ = js.DeleteStream(ctx, name)
}
