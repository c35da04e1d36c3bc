// Package cli implements the ax command line: one file per command group,
// each adding its commands to the root built by [NewRoot].
package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/redact"
	"github.com/ax-mesh/ax/internal/streams"
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
	logFormat   string

	// wrapJS, when set (by tests only), wraps the JetStream context of
	// each connection a command opens: a fault injected into the real
	// thing.
	wrapJS func(jetstream.JetStream) jetstream.JetStream

	// started is set when a command's own work (its RunE) begins: an
	// error before it is the command line's ([ExitUsage]).
	started bool

	// refuse ends the command with the permission the server refused one
	// of its connections (see [env.connect]); nil outside [Execute].
	refuse context.CancelCauseFunc
	// errMu serializes the writes to errOut from the connections' error
	// handlers.
	errMu sync.Mutex
}

// Exit codes of the ax command line (docs/OPERATIONS.md, "The ax command line").
const (
	// ExitOK: the command did what it says.
	ExitOK = 0
	// ExitFailed: the command failed; nothing it would have changed was
	// changed (a submit: the task is not stored).
	ExitFailed = 1
	// ExitUsage: unknown command or flag, or wrong arguments; nothing ran.
	ExitUsage = 2
	// ExitMaybeStored: a submit published its task but could not read the
	// acknowledgement: the task may be stored and run. Submitting it again
	// with the same id is safe; with a new id it may run twice.
	ExitMaybeStored = 3
)

// Execute runs the ax command line with args and returns the exit code. A
// permission violation the server reports on a connection of the command
// ends it with that one error, naming the user and the command.
func Execute(ctx context.Context, args []string, out, errOut io.Writer) int {
	root, e := newRoot(out, errOut)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.refuse = cancel
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitFailed
	var usage usageError
	switch {
	case errors.As(err, &usage) || !e.started:
		// Before its RunE: an unknown command or flag, a wrong argument.
		code = ExitUsage
		if cmd != nil {
			defer fmt.Fprintf(errOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	case errors.Is(err, ax.ErrMaybeStored):
		code = ExitMaybeStored
	}
	// One error: the command's when it names the refusal (with what to
	// do), else the refusal alone (the command's is then its consequence,
	// a request cut short or a wait given up), worded by user and command.
	var refused, named *denied.Error
	if errors.As(context.Cause(ctx), &refused) && !errors.As(err, &named) && code != ExitMaybeStored {
		err = refused
	}
	if code != ExitMaybeStored && errors.As(err, &named) && cmd != nil {
		// The refusal alone, worded by user and command: the text of the
		// errors wrapping it was made before it named the command.
		named.Command = cmd.CommandPath()
		err = named
	}
	fmt.Fprintln(errOut, "ax:", redact.Error(err))
	return code
}

// usageError is a command line the command cannot run: an unknown
// subcommand, a wrong argument.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// registrations add the command groups to the root, one per file.
var registrations = []func(*cobra.Command, *env){
	addDev, addServer, addProvision, addWorker, addSubmit, addWorkflow, addTask, addBench, addOps, addScheduler, addCron, addPools, addDashboard,
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
	// No default is read from the environment here: help prints a flag's
	// default, and NATS_PASSWORD, a token in NATS_URL or NATS_USER are
	// secrets. [env.resolve] reads them after parsing.
	f.StringVarP(&e.server, "server", "s", "", "NATS server URLs, comma separated (default $NATS_URL, else "+nats.DefaultURL+")")
	f.StringVar(&e.prefix, "prefix", streams.DefaultPrefix, "subject prefix of the ax deployment")
	f.StringVar(&e.inboxPrefix, "inbox-prefix", "",
		"prefix of this connection's reply inboxes (default $AX_INBOX_PREFIX, else _INBOX.<user> with a user and password, else _INBOX.<role>: worker, scheduler, service for ax submit, operator otherwise)")
	f.StringVar(&e.creds, "creds", "", "NATS user credentials file (default $NATS_CREDS)")
	f.StringVar(&e.nkey, "nkey", "", "NATS nkey seed file (default $NATS_NKEY)")
	f.StringVar(&e.user, "user", "", "NATS user name, or a token without --password (default $NATS_USER)")
	f.StringVar(&e.password, "password", "", "NATS password (default $NATS_PASSWORD); prefer the variable, or --creds/--nkey, to the flag, which ps shows")
	f.StringVar(&e.tlsCert, "tlscert", "", "TLS client certificate file")
	f.StringVar(&e.tlsKey, "tlskey", "", "TLS client key file")
	f.StringVar(&e.tlsCA, "tlsca", "", "TLS certificate authority file")
	f.BoolVar(&e.jsonOut, "json", false, "print JSON instead of tables")
	f.StringVar(&e.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&e.logFormat, "log-format", logConsole, `log format of the commands that log (dev, server, worker, scheduler, dashboard): "console" (a line per entry) or "json" (an object per line); times in ISO 8601, UTC ($AX_LOG_FORMAT when not given)`)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return e.resolve(cmd) }
	for _, register := range registrations {
		register(root, e)
	}
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err == nil && len(rest) > 0 {
				err = fmt.Errorf("unknown help topic %q", strings.Join(args, " "))
			}
			if err != nil {
				return usageError{err}
			}
			return target.Help()
		},
	})
	e.guard(root)
	return root, e
}

// envFlags are the flags whose default is read from the environment after
// the command line is parsed (see [env.resolve]).
var envFlags = []struct{ flag, env string }{
	{"server", "NATS_URL"}, {"inbox-prefix", "AX_INBOX_PREFIX"}, {"creds", "NATS_CREDS"}, {"nkey", "NATS_NKEY"},
	{"user", "NATS_USER"}, {"password", "NATS_PASSWORD"}, {"log-format", "AX_LOG_FORMAT"}, {"action-token", "AX_DASHBOARD_TOKEN"},
}

// resolve gives each flag of cmd not set on the command line its value
// from the environment, after parsing, so that no help shows it.
func (e *env) resolve(cmd *cobra.Command) error {
	for _, ef := range envFlags {
		f := cmd.Flags().Lookup(ef.flag)
		if f == nil || f.Changed {
			continue
		}
		if v := os.Getenv(ef.env); v != "" {
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("$%s: %w", ef.env, err)
			}
		}
	}
	if e.server == "" {
		e.server = nats.DefaultURL
	}
	if e.logFormat != logConsole && e.logFormat != logJSON {
		return fmt.Errorf("--log-format %q: want console or json", e.logFormat)
	}
	return nil
}

// guard walks the command tree: a group of commands given an unknown
// subcommand fails with a [usageError] (cobra prints the group's help and
// succeeds), and every command notes when its own work starts, so that
// [Execute] tells a wrong command line from a failed command.
func (e *env) guard(cmd *cobra.Command) {
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			cmd.SuggestionsMinimumDistance = cmp.Or(cmd.SuggestionsMinimumDistance, 2)
			if suggestions := cmd.SuggestionsFor(args[0]); len(suggestions) > 0 {
				msg += "; did you mean " + strings.Join(suggestions, " or ") + "?"
			}
			return usageError{errors.New(msg)}
		}
	} else if run := cmd.RunE; run != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			e.started = true
			return run(cmd, args)
		}
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		e.guard(sub)
	}
}

func (e *env) names() (streams.Names, error) { return streams.NewNames(e.prefix) }

// Roles whose reply-inbox prefix a command takes when the user is not
// known (docs/SECURITY.md): no user name, a token, a credentials or nkey
// file.
const (
	roleWorker    = "worker"
	roleScheduler = "scheduler"
	roleService   = "service"
	roleOperator  = "operator"
)

// inboxFor returns the reply-inbox prefix of a connection made for role:
// --inbox-prefix (or $AX_INBOX_PREFIX) when given, else "_INBOX.<user>"
// when the user is known (every role of docs/ax-permissions.conf may
// subscribe to its own), else "_INBOX.<role>".
func (e *env) inboxFor(role string) string {
	if e.inboxPrefix != "" {
		return e.inboxPrefix
	}
	if user := e.userName(); user != "" && !strings.ContainsAny(user, " \t\r\n*>") {
		return nats.InboxPrefix + user
	}
	return nats.InboxPrefix + role
}

// publishOnlyUser says whether the user is one of the producer roles of
// docs/ax-permissions.conf, which may only publish tasks: service,
// core-service and producer-<tenant>.
func publishOnlyUser(user string) bool {
	return user == "service" || user == "core-service" || strings.HasPrefix(user, "producer-")
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
	if e.wrapJS != nil {
		js = e.wrapJS(js)
	}
	return nc, js, nil
}

// The log formats of --log-format.
const (
	logConsole = "console"
	logJSON    = "json"
)

// logger returns the logger of --log-format and --log-level: console lines
// or JSON objects, both with ISO 8601 times in UTC, every line through the
// redactor. sampled (the long-running roles) samples repeated entries as
// zap's production logger does.
func (e *env) logger(sampled bool) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(e.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		enc.AppendString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	cfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	opts := []zap.Option{zap.AddCaller()}
	if e.logFormat == logJSON {
		enc = zapcore.NewJSONEncoder(cfg)
		opts = append(opts, zap.AddStacktrace(zapcore.ErrorLevel))
	} else {
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	}
	// Every line goes through the redactor: no log shows a URL's password.
	var core zapcore.Core = zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(redact.Writer(os.Stderr))), zap.NewAtomicLevelAt(level))
	if sampled { // as zap.NewProductionConfig
		core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
	}
	return zap.New(core, opts...), nil
}
