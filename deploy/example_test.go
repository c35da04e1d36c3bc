package deploy_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Email is the payload of an "email" task.
type Email struct {
	To string `json:"to"`
}

// Kind names the task type of [Email] args.
func (Email) Kind() string { return "email" }

// One process provisions the deployment; a process that embeds several
// parts (here a worker and a client; a leader and the management API the
// same way) opens it and builds them from it, so that none can disagree on
// the names, the ack wait or the record store. A service or a worker alone
// needs no handle: see ax.NewClient and worker.New.
func ExampleOpen() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "ax-example")
	defer func() { _ = os.RemoveAll(dir) }()
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	srv.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)

	// The operator's `ax provision`, once.
	if _, err := deploy.Open(ctx, js, &deploy.Options{Provision: true, Streams: &deploy.StreamsConfig{AckWait: 20 * time.Second}}); err != nil {
		fmt.Println(err)
		return
	}

	// The parts, from the opened deployment.
	d, err := deploy.Open(ctx, js, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	sent := make(chan string, 1)
	reg := worker.NewRegistry()
	_ = worker.HandleArgs(reg, func(ctx context.Context, task *worker.Task, msg Email) error {
		sent <- msg.To
		return nil
	}, nil)
	w, _ := d.Worker(ctx, &worker.Config{Registry: reg})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready(): // it serves its shards: what is submitted now starts in priority order
	case err := <-done:
		fmt.Println(err)
		return
	}

	client, _ := d.Client(ctx, nil)
	defer func() { _ = client.Close() }()
	if _, err := client.SubmitJSON(ctx, Email{To: "ada@example.com"}, nil); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ack wait:", d.AckWait())
	select {
	case to := <-sent:
		fmt.Println("sent to", to)
	case <-time.After(10 * time.Second):
		fmt.Println("not handled")
	}
	cancel()
	<-done
	// Output:
	// ack wait: 20s
	// sent to ada@example.com
}
