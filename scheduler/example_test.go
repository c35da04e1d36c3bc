package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every `ax scheduler` process runs a leader; one of them leads at a time and
// runs the control loops (delayed release, cron, aging, backpressure, the
// reconciler) until its context ends.
func ExampleLeader_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, stop := runDeployment(ctx)
	defer stop()

	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}

	l, err := scheduler.New(ctx, js, nil)
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

// runDeployment stands in for a deployment's NATS server, provisioned as
// `ax provision` provisions it: an embedded nats-server with JetStream,
// its store in a temporary directory. In a service the URL is your
// server's (nats.DefaultURL for `ax dev`). stop shuts the server down and
// removes its store.
func runDeployment(ctx context.Context) (url string, stop func()) {
	dir, err := os.MkdirTemp("", "ax-example")
	if err != nil {
		panic(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go srv.Start()
	stop = func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		panic("nats-server not ready within 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		stop()
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = deploy.Open(ctx, js, &deploy.Options{Provision: true})
	}
	if err != nil {
		stop()
		panic(err)
	}
	return srv.ClientURL(), stop
}
