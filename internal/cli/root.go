// Package cli implements the ax command line: one file per command group,
// each adding its commands to the root built by [NewRoot].
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/redact"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Version of ax, reported by workers and the management API.
const Version = "0.1.0"

// env is what every command shares: output streams and global flags.
type env struct {
	out, errOut io.Writer

	server      string
	prefix      string
	inboxPrefix string
	creds       string
	nkey        string
	user        string
	password    string
	tlsCert     string
	tlsKey      string
	tlsCA       string
	jsonOut     bool
	logLevel    string

	// refuse ends the command with the permission the server refused one
	// of its connections (see [env.connect]); nil outside [Execute].
	refuse context.CancelCauseFunc
	// errMu serializes the writes to errOut from the connections' error
	// handlers.
	errMu sync.Mutex
}

// Execute runs the ax command line with args and returns the exit code. A
// permission violation the server reports on a connection of the command
// ends it with that one error, naming the user and the subject.
func Execute(ctx context.Context, args []string, out, errOut io.Writer) int {
	root, e := newRoot(out, errOut)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.refuse = cancel
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	// One error: the command's when it names the refusal (with what to
	// do), else the refusal alone (the command's is then its consequence,
	// a request cut short or a wait given up).
	var refused, named *denied.Error
	if errors.As(context.Cause(ctx), &refused) && !errors.As(err, &named) {
		err = refused
	}
	if err != nil {
		fmt.Fprintln(errOut, "ax:", redact.Error(err))
		return 1
	}
	return 0
}

// registrations add the command groups to the root, one per file.
var registrations = []func(*cobra.Command, *env){
	addDev, addServer, addProvision, addWorker, addSubmit, addTask, addBench, addOps, addScheduler, addCron, addPools, addDashboard,
	addLimits,
}

// NewRoot builds the ax command tree.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root, _ := newRoot(out, errOut)
	return root
}

func newRoot(out, errOut io.Writer) (*cobra.Command, *env) {
	e := &env{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:           "ax",
		Short:         "ax schedules asynchronous tasks for Go services over NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	f := root.PersistentFlags()
	f.StringVarP(&e.server, "server", "s", envOr("NATS_URL", nats.DefaultURL), "NATS server URLs, comma separated (env NATS_URL)")
	f.StringVar(&e.prefix, "prefix", streams.DefaultPrefix, "subject prefix of the ax deployment")
	f.StringVar(&e.inboxPrefix, "inbox-prefix", os.Getenv("AX_INBOX_PREFIX"),
		"prefix of this connection's reply inboxes (env AX_INBOX_PREFIX; default _INBOX.<role>: worker, scheduler, service for ax submit, operator otherwise)")
	f.StringVar(&e.creds, "creds", os.Getenv("NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	f.StringVar(&e.nkey, "nkey", os.Getenv("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	f.StringVar(&e.user, "user", os.Getenv("NATS_USER"), "NATS user name or token (env NATS_USER)")
	f.StringVar(&e.password, "password", os.Getenv("NATS_PASSWORD"), "NATS password (env NATS_PASSWORD; prefer it, or --creds/--nkey, to the flag, which ps shows)")
	f.StringVar(&e.tlsCert, "tlscert", "", "TLS client certificate file")
	f.StringVar(&e.tlsKey, "tlskey", "", "TLS client key file")
	f.StringVar(&e.tlsCA, "tlsca", "", "TLS certificate authority file")
	f.BoolVar(&e.jsonOut, "json", false, "print JSON instead of tables")
	f.StringVar(&e.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	for _, register := range registrations {
		register(root, e)
	}
	return root, e
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (e *env) names() (streams.Names, error) { return streams.NewNames(e.prefix) }

// Roles whose default reply-inbox prefix a command takes (docs/SECURITY.md):
// each role of docs/ax-permissions.conf may subscribe only to
// _INBOX.<role>.>, never to another role's inbox.
const (
	roleWorker    = "worker"
	roleScheduler = "scheduler"
	roleService   = "service"
	roleOperator  = "operator"
)

// inboxFor returns the reply-inbox prefix of a connection made for role:
// --inbox-prefix when given, else "_INBOX.<role>".
func (e *env) inboxFor(role string) string {
	if e.inboxPrefix != "" {
		return e.inboxPrefix
	}
	return nats.InboxPrefix + role
}

// userName is the user the flags connect as, for error messages: the
// --user given with a password, or the user of a --server URL that has a
// password; "" when it is not known (a token, a credentials or nkey file).
func (e *env) userName() string {
	if e.user != "" && e.password != "" {
		return e.user
	}
	if e.user != "" || e.creds != "" || e.nkey != "" {
		return ""
	}
	for _, s := range strings.Split(e.server, ",") {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				return u.User.Username()
			}
		}
	}
	return ""
}

// onAsyncError handles what the server reports on a connection without a
// request to answer: a permission violation ends the command with it
// ([Execute]) when fatal is set, and is printed otherwise; other errors
// (a slow consumer) are printed, as nats.go does by default.
func (e *env) onAsyncError(fatal bool) nats.ErrHandler {
	user := e.userName()
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if refused := denied.Parse(err, user); refused != nil {
			if fatal && e.refuse != nil {
				e.refuse(refused)
				return
			}
			err = refused
		}
		msg := redact.Error(err).Error()
		if sub != nil {
			msg += fmt.Sprintf(" (subscription on %s)", sub.Subject)
		}
		e.errMu.Lock()
		defer e.errMu.Unlock()
		fmt.Fprintln(e.errOut, "nats:", msg)
	}
}

// natsOptions are the connection options the flags select for a connection
// named name acting as role; see [env.connect] for fatal.
func (e *env) natsOptions(name, role string, fatal bool) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.CustomInboxPrefix(e.inboxFor(role)), nats.ErrorHandler(e.onAsyncError(fatal))}
	if e.creds != "" {
		opts = append(opts, nats.UserCredentials(e.creds))
	}
	if e.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(e.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", e.nkey, err)
		}
		opts = append(opts, opt)
	}
	if e.user != "" && e.password == "" {
		opts = append(opts, nats.Token(e.user))
	} else if e.user != "" {
		opts = append(opts, nats.UserInfo(e.user, e.password))
	}
	if e.tlsCert != "" || e.tlsKey != "" {
		opts = append(opts, nats.ClientCert(e.tlsCert, e.tlsKey))
	}
	if e.tlsCA != "" {
		opts = append(opts, nats.RootCAs(e.tlsCA))
	}
	return opts, nil
}

// connect opens a connection to --server as role with the flags'
// credentials. Its errors never show a URL's password. A permission the
// server refuses on it ends the command with one error naming the user and
// the subject ([Execute]): a JetStream request to a refused subject would
// otherwise just wait out its timeout.
func (e *env) connect(name, role string) (*nats.Conn, jetstream.JetStream, error) {
	return e.connectAs(name, role, true)
}

// connectAs is [env.connect]; with fatal unset a refused permission is
// only printed (the dashboard answers it 403 in the page).
func (e *env) connectAs(name, role string, fatal bool) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := e.natsOptions(name, role, fatal)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(e.server, opts...)
	if err != nil {
		return nil, nil, redact.Error(fmt.Errorf("connect to %s: %w", e.server, err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, redact.Error(fmt.Errorf("jetstream on %s: %w", e.server, err))
	}
	return nc, js, nil
}

// logger returns a JSON logger for servers, or a console one when dev is set.
func (e *env) logger(dev bool) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(e.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var cfg zap.Config
	if dev {
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	} else {
		cfg = zap.NewProductionConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	// Every line goes through the redactor: no log shows a URL's password.
	enc := zapcore.NewJSONEncoder(cfg.EncoderConfig)
	if dev {
		enc = zapcore.NewConsoleEncoder(cfg.EncoderConfig)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(redact.Writer(os.Stderr))), cfg.Level)
	opts := []zap.Option{zap.AddCaller()}
	if !dev { // as zap.NewProductionConfig: sampled, stack traces on errors
		core = zapcore.NewSamplerWithOptions(core, time.Second, cfg.Sampling.Initial, cfg.Sampling.Thereafter)
		opts = append(opts, zap.AddStacktrace(zapcore.ErrorLevel))
	}
	return zap.New(core, opts...), nil
}
