package axtest

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Options tune [Setup]. The zero value is a plain server with ax
// provisioned with the defaults and a client with the defaults.
type Options struct {
	// Server starts the server; set Server.Fast for a test of the fast tier.
	Server natstest.Options
	// Streams provisions the deployment; nil means the defaults.
	Streams *streams.Config
	// Client configures the bundle's client; nil means the defaults.
	Client *ax.Config
	// User, when set, is the user of Server.ConfigFile the bundle's
	// connection logs in as ([natstest.Server.ConnectAs]). It provisions,
	// so it must be a privileged one (docs/ax-permissions.conf:
	// "scheduler"); a test connects as another role with ConnectAs. Empty
	// means no user, for a server without authorization.
	User string
	// NoClient leaves [Bundle.Client] nil, for a test whose clients are its
	// own (a publish-only one, a role's); [Bundle.Store] is then a store of
	// its own.
	NoClient bool
}

// Bundle is a provisioned deployment on a real server and what a test
// drives it with.
type Bundle struct {
	// Server is the embedded JetStream server.
	Server *natstest.Server
	// NC and JS are the bundle's connection (the user of [Options.User]).
	NC *nats.Conn
	JS jetstream.JetStream
	// Client submits tasks on JS; nil under [Options.NoClient].
	Client *ax.Client
	// Store reads and moves the deployment's records (the client's).
	Store *kv.Store
}

// Setup starts a server, provisions ax on it and opens a client; all of it
// ends with the test. Under go test -short it skips the test unless
// o.Server.Fast.
func Setup(t testing.TB, o Options) *Bundle {
	t.Helper()
	srv := natstest.Start(t, o.Server)
	b := &Bundle{Server: srv}
	if o.User != "" {
		b.NC, b.JS = srv.ConnectAs(o.User)
	} else {
		b.NC, b.JS = srv.Connect()
	}
	natstest.Provision(t, b.JS, o.Streams)
	ctx := context.Background()
	if o.NoClient {
		cfg := kv.StoreConfig{}
		if o.Streams != nil {
			cfg.Names = o.Streams.Names
		}
		store, err := kv.NewStore(ctx, b.JS, &cfg)
		require.NoError(t, err)
		b.Store = store
		return b
	}
	client, err := ax.NewClient(ctx, b.JS, o.Client)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	b.Client, b.Store = client, client.Store()
	return b
}

// Fast is [Setup] with the defaults for a test of the fast tier.
func Fast(t testing.TB) *Bundle {
	t.Helper()
	return Setup(t, Options{Server: natstest.Options{Fast: true}})
}

// Connect opens another connection to the bundle's server (no user),
// closed at cleanup: a worker or a leader has its own, as in a deployment.
func (b *Bundle) Connect(opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	return b.Server.Connect(opts...)
}

// Submit submits spec with the bundle's client and returns the task's id.
func (b *Bundle) Submit(t natstest.TB, spec ax.TaskSpec) string {
	t.Helper()
	info, err := b.Client.Submit(context.Background(), spec)
	require.NoError(t, err)
	return info.ID
}

// Get returns the record of the one task (of any tenant) with id. t may be
// the collector of an EventuallyWithT condition.
func (b *Bundle) Get(t natstest.TB, id string) *kv.Record {
	t.Helper()
	rec, err := Record(context.Background(), b.Store, id)
	require.NoError(t, err)
	return rec
}
