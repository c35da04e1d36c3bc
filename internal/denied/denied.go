// Package denied turns the permission violations a NATS server reports on
// a connection into one clear error naming the user and the subject.
//
// The server refuses a publish or a subscription the user may not make by
// sending an asynchronous error on the connection (nats.go hands it to the
// connection's error handler and keeps it as its LastError); a JetStream
// request to a refused subject is otherwise just never answered, and waits
// out its timeout. [Watch] ends a context as soon as such a report arrives,
// so that work guarded by it fails at once with an [*Error].
package denied

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// PermissionsFile is the file the errors point to.
const PermissionsFile = "docs/ax-permissions.conf"

// Error is a publish or subscription the server refused a user. It
// matches [nats.ErrPermissionViolation] with errors.Is.
type Error struct {
	// User is the connection's user name; empty when not known (a token,
	// credentials or nkey file).
	User string
	// Op is [OpPublish] or [OpSubscribe].
	Op string
	// Subject is the subject refused.
	Subject string
	// Hint, when set, says what to do.
	Hint string
	// Command, when set, is the command the user ran ("ax cron ls"): the
	// error then names it first, and the refused subject as the reason.
	Command string
}

// Error says who may not do what, e.g. "permission denied: user worker-1
// may not publish $JS.API.STREAM.INFO.KV_AX_LOCKS (docs/ax-permissions.conf)",
// or with [Error.Command] "permission denied: user operator may not run
// `ax cron rm`: the server refused it publish $KV.AX_CONTROL.cron.nightly
// (docs/ax-permissions.conf)".
func (e *Error) Error() string {
	user := "this connection's user"
	if e.User != "" {
		user = "user " + e.User
	}
	var msg string
	if e.Command != "" {
		msg = fmt.Sprintf("permission denied: %s may not run `%s`: the server refused it %s (%s)", user, e.Command, e.Refusal(), PermissionsFile)
	} else {
		msg = fmt.Sprintf("permission denied: %s may not %s %s (%s)", user, e.Op, e.Subject, PermissionsFile)
	}
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// Refusal names what the server refused: "publish ax.admin.ax.stats", or
// for a reply inbox "the reply inbox _INBOX.service.> (--inbox-prefix)".
func (e *Error) Refusal() string {
	if e.Op == OpSubscribe && strings.HasPrefix(e.Subject, nats.InboxPrefix) {
		return fmt.Sprintf("the reply inbox %s (--inbox-prefix; the shipped users have _INBOX.<user>)", e.Subject)
	}
	return e.Op + " " + e.Subject
}

// Unwrap makes the error match [nats.ErrPermissionViolation].
func (e *Error) Unwrap() error { return nats.ErrPermissionViolation }

// The operations a server refuses.
const (
	OpPublish   = "publish"
	OpSubscribe = "subscribe to"
)

// report is the server's text of a violation, as nats.go passes it on.
var report = regexp.MustCompile(`(?i)Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// Parse returns the [*Error] of a violation the server reported (err as
// nats.go gives it to the error handler or LastError) by user, or nil when
// err is no permission violation.
func Parse(err error, user string) *Error {
	var d *Error
	if errors.As(err, &d) {
		return d
	}
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := report.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	op := OpPublish
	if strings.EqualFold(m[1], "Subscription") {
		op = OpSubscribe
	}
	return &Error{User: user, Op: op, Subject: m[2]}
}

// User returns the user name the connection was made with, or "" when it
// is not known (no user name and password given as options).
func User(nc *nats.Conn) string { return nc.Opts.User }

// pollEvery is how often a [Guard] reads the connection's last error.
const pollEvery = 20 * time.Millisecond

// Guard watches one connection for violations while some work runs.
type Guard struct {
	nc     *nats.Conn
	user   string
	base   error // the connection's last error when the watch began
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Watch returns a context derived from ctx that ends, its cause an
// [*Error], as soon as the server reports a violation on nc after Watch
// was called (a violation caused by any user of nc, which the guarded work
// shares it with). It reads nc's last error every 20 ms, so it changes
// nothing on nc. Call [Guard.Stop] when the work is done: it ends the
// returned context.
func Watch(ctx context.Context, nc *nats.Conn) (*Guard, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	g := &Guard{nc: nc, user: User(nc), base: nc.LastError(), cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
	go g.poll(ctx)
	return g, ctx
}

func (g *Guard) poll(ctx context.Context) {
	defer close(g.done)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.stop:
			return
		case <-tick.C:
		}
		if d := g.reported(); d != nil {
			g.cancel(d)
			return
		}
	}
}

// reported returns the violation reported since the watch began, or nil.
func (g *Guard) reported() *Error {
	err := g.nc.LastError()
	if err == nil || err == g.base { // the same report (each is a new value)
		return nil
	}
	return Parse(err, g.user)
}

// Err returns the violation reported since the watch began, if any, else
// err: call it with the guarded work's error (nil for none), which then
// ended because its request was refused.
func (g *Guard) Err(err error) error {
	if d := g.reported(); d != nil {
		return d
	}
	return err
}

// checkWait bounds the flush of [Guard.Check].
const checkWait = 10 * time.Second

// Check waits until the server has processed everything sent on nc so far
// (a flush: a refused subscription is reported before the flush returns),
// for at most 10 s or until ctx ends, and returns the violation reported
// since the watch began, if any. A flush that fails (the connection
// reconnecting, ctx ended) only makes the answer less certain: it is no
// error of its own.
func (g *Guard) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkWait)
	defer cancel()
	_ = g.nc.FlushWithContext(ctx)
	return g.Err(nil)
}

// Stop ends the watch and its context.
func (g *Guard) Stop() {
	g.once.Do(func() {
		close(g.stop)
		<-g.done
		g.cancel(context.Canceled)
	})
}
