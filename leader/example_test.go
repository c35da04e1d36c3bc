package leader_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/leader"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// exampleJetStream starts an embedded JetStream server with the default
// deployment provisioned; stop ends it all.
func exampleJetStream(ctx context.Context) (js jetstream.JetStream, stop func()) {
	dir, _ := os.MkdirTemp("", "ax-example")
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go srv.Start()
	srv.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(srv.ClientURL())
	js, _ = jetstream.New(nc)
	_, _ = streams.Provision(ctx, js, nil)
	_ = kv.Provision(ctx, js, nil)
	return js, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

// Every `ax scheduler` process runs a leader; one of them leads at a time and
// runs the control loops (delayed release, cron, aging, backpressure, the
// reconciler) until its context ends.
func ExampleLeader_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, stop := exampleJetStream(ctx)
	defer stop()

	l, err := leader.New(ctx, js, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); !l.Leading() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("leading:", l.Leading())
	cancel()
	<-done
	fmt.Println("leading after Run returned:", l.Leading())
	// Output:
	// leading: true
	// leading after Run returned: false
}
