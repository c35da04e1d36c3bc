package natstest

import (
	"context"
	"os"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Example starts an embedded JetStream server with the default deployment
// provisioned, for Example functions (which have no testing.T); stop ends
// it all and removes its store.
func Example(ctx context.Context) (js jetstream.JetStream, stop func()) {
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
