package ax_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/kv"
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

// A service submits a task: it is stored in its priority bucket and its
// record is READY until a worker claims it.
func ExampleClient_Submit() {
	ctx := context.Background()
	js, stop := exampleJetStream(ctx)
	defer stop()

	client, err := ax.NewClient(ctx, js, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close() }()
	info, err := client.Submit(ctx, ax.TaskSpec{ID: "welcome-42", Type: "email", Tenant: "acme",
		Priority: ax.P1, Payload: []byte(`{"to":"ada@example.com"}`), Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, _, _ := client.Store().Get(ctx, info.ID)
	fmt.Println(info.ID, info.Stream, rec.State)
	// Output:
	// welcome-42 AX_P1 READY
}
