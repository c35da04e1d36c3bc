// Command idsubject prices a WorkQueue stream whose message subjects end
// in the task's id (one subject per message, -u) against subjects shared
// by a key: the CPU per message of publishing, consuming and acking, the
// server's memory after the backlog is stored, and the time to find one
// task of the backlog by its id (a direct get of the first message on
// "<stream>.*.*.*.*.<id>"). Used to price serving a task no worker has
// claimed yet from its bucket instead of a record written at submit
// (docs/decisions/task-path-cost.md):
//
//	ax server --listen 127.0.0.1:4333 --data /tmp/p &
//	go run ./internal/bench/pricing/idsubject -pid $! -n 200000 -u
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

func main() {
	url := flag.String("s", "nats://127.0.0.1:4333", "server URL")
	n := flag.Int("n", 50000, "messages in the backlog")
	unique := flag.Bool("u", false, "a token per task id")
	pid := flag.Int("pid", 0, "server pid")
	flag.Parse()
	ctx := context.Background()
	nc, err := nats.Connect(*url)
	if err != nil {
		panic(err)
	}
	js, _ := jetstream.New(nc)
	name := "IDS" + strconv.FormatBool(*unique)
	_ = js.DeleteStream(ctx, name)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Retention: jetstream.WorkQueuePolicy, AllowDirect: true})
	if err != nil {
		panic(err)
	}
	ids := make([]string, *n)
	data := make([]byte, 100)
	c0, s0, t0 := bench.SelfCPU(), bench.ProcCPU(*pid), time.Now()
	var futs []jetstream.PubAckFuture
	for i := range *n {
		ids[i] = nuid.Next()
		subj := fmt.Sprintf("%s.%d.tenant.type.key%d", name, i%32, i%100)
		if *unique {
			subj += "." + ids[i]
		}
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set("Nats-Msg-Id", ids[i])
		f, err := js.PublishMsgAsync(m)
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
	pub := time.Since(t0)
	st2, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", *pid))
	for _, l := range strings.Split(string(st2), "\n") {
		if strings.HasPrefix(l, "VmRSS") {
			fmt.Println("server after publish:", l)
		}
	}
	c1, s1 := bench.SelfCPU(), bench.ProcCPU(*pid)
	// lookups of ids in the backlog
	var look time.Duration
	found := 0
	if *unique {
		for k := 0; k < 20; k++ {
			id := ids[(k*7919)%*n]
			t := time.Now()
			m, err := st.GetMsg(ctx, 0, jetstream.WithGetMsgSubject(name+".*.*.*.*."+id))
			look += time.Since(t)
			if err == nil && m != nil {
				found++
			} else {
				fmt.Println("lookup:", err)
			}
		}
	}
	c2, s2, t2 := bench.SelfCPU(), bench.ProcCPU(*pid), time.Now()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
	if err != nil {
		panic(err)
	}
	got := 0
	for got < *n {
		b, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			panic(err)
		}
		for m := range b.Messages() {
			_ = m.Ack()
			got++
		}
	}
	nc.Flush()
	time.Sleep(200 * time.Millisecond)
	c3, s3 := bench.SelfCPU(), bench.ProcCPU(*pid)
	fmt.Printf("unique=%v n=%d pub/s=%.0f pub_client_us=%.1f pub_server_us=%.1f | consume+ack client_us=%.1f server_us=%.1f (%.1fs) | lookup %d/20 avg %.2f ms\n",
		*unique, *n, float64(*n)/pub.Seconds(), us(c1-c0, *n), us(s1-s0, *n), us(c3-c2, *n), us(s3-s2, *n), time.Since(t2).Seconds(), found, float64(look.Microseconds())/20/1000)
	_ = js.DeleteStream(ctx, name)
}

func us(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
