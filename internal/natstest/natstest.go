// Package natstest starts real embedded NATS servers with JetStream for
// tests: one temp-dir store, a random port on 127.0.0.1, shut down when the
// test ends. It is the one helper every ax test uses; nothing is mocked.
// Under go test -short (the fast tier) a test that starts a server skips,
// unless its [Options.Fast] says it belongs to the tier.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is a running embedded JetStream server.
type Server struct {
	*server.Server
	t testing.TB
}

// Options tune [Start]. The zero value starts a plain JetStream server.
type Options struct {
	// StoreDir keeps the JetStream data; empty means a new temp dir.
	StoreDir string
	// Port of the client listener; 0 means a random free port.
	Port int
	// ConfigFile, when set, is loaded first (for permission tests).
	ConfigFile string
	// Fast keeps the test in the fast tier (go test -short), which skips
	// the others that start a server: a few such tests per package, each
	// done within about a second, cover the path through a real server in
	// the edit-test loop; the whole suite runs them all.
	Fast bool
}

// SkipShort is the reason a test that starts a server gives for skipping
// under -short.
const SkipShort = "starts a JetStream server: the whole suite (go test without -short) runs it"

// Start runs an embedded JetStream server for the test and stops it at
// cleanup. Under go test -short it skips the test unless o.Fast.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if testing.Short() && !o.Fast {
		t.Skip(SkipShort)
	}
	opts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		opts, err = server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			t.Fatalf("natstest: load config %s: %v", o.ConfigFile, err)
		}
	}
	opts.Host = "127.0.0.1"
	opts.Port = -1
	if o.Port > 0 {
		opts.Port = o.Port
	}
	opts.JetStream = true
	opts.StoreDir = o.StoreDir
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	opts.NoLog = true
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	s := &Server{Server: srv, t: t}
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down and waits for it; calling it twice is fine.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Connect opens a client connection that is closed at cleanup.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		s.t.Fatalf("natstest: connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(APITimeout))
	if err != nil {
		s.t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// ConnectAs is [Server.Connect] as user of the server's configuration file
// ([Options.ConfigFile]) with the password "<user>-secret" and the inbox
// prefix "_INBOX.<user>", as docs/ax-permissions.conf and docs/SECURITY.md
// give each role: every user may subscribe to its own _INBOX.<user>.>.
// opts come after these, so an option of opts replaces one of them
// (another inbox prefix, for a test of a refused one).
func (s *Server) ConnectAs(user string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	opts = append([]nats.Option{nats.UserInfo(user, user+"-secret"), nats.CustomInboxPrefix(nats.InboxPrefix + user)}, opts...)
	return s.Connect(opts...)
}

// APITimeout bounds a JetStream request or publish made without a deadline
// on a [Server.Connect] connection (nats.go's default is 5 s). Tests run
// under the race detector on loaded 2-core machines, where the embedded
// server, sharing the test process, answered a batch submit's record
// writes and a consumer listing after more than 5 s.
const APITimeout = 20 * time.Second

// RunFastServer is [RunServer] for a test of the fast tier ([Options.Fast]).
func RunFastServer(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Start(t, Options{Fast: true}).Connect()
}

// RunServer starts a server and returns one connection to it: the common case.
func RunServer(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Start(t, Options{}).Connect()
}
