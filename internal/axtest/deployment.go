package axtest

import (
	"context"
	"os"
	"time"

	"github.com/ax-mesh/ax/deploy"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RunDeployment stands in, in the examples, for a deployment's NATS server
// provisioned as `ax provision` provisions it: an embedded nats-server with
// JetStream, its store in a temporary directory. In a service the URL is
// your server's (nats.DefaultURL for `ax dev`). stop shuts the server down
// and removes its store. An example has no testing.T, so it panics on
// failure.
func RunDeployment(ctx context.Context) (url string, stop func()) {
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
