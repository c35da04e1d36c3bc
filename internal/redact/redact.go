// Package redact removes secrets from text that ax prints or logs: the
// password (or token) of every URL's user information, such as
// "nats://worker:secret@host:4222" in a --server value or in an error that
// quotes it. It is the one place that knows how; every error and log line
// that may name a server URL passes through [String] or [Error].
package redact

import (
	"errors"
	"io"
	"regexp"
)

// Mask replaces a redacted secret.
const Mask = "xxxxx"

// userinfo matches "scheme://userinfo@": group 1 is "scheme://", group 2 the
// user, group 3 ":password" when there is one.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^:@/\s"'?#]*)(:[^@/\s"'?#]*)?@`)

// String returns s with the password of every URL's user information
// replaced by [Mask]; a user information without a password (a token, as
// in "nats://s3cr3t@host") is masked whole.
func String(s string) string {
	return userinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfo.FindStringSubmatch(m)
		if sub[3] == "" {
			return sub[1] + Mask + "@"
		}
		return sub[1] + sub[2] + ":" + Mask + "@"
	})
}

// Error returns err with its text redacted by [String], still matching
// err with errors.Is and errors.As; nil stays nil, and an error with
// nothing to redact is returned as is.
func Error(err error) error {
	if err == nil {
		return nil
	}
	text := String(err.Error())
	if text == err.Error() {
		return err
	}
	return &redacted{text: text, err: err}
}

type redacted struct {
	text string
	err  error
}

func (r *redacted) Error() string { return r.text }
func (r *redacted) Unwrap() error { return r.err }

// Is keeps errors.Is working for the sentinels err wraps.
func (r *redacted) Is(target error) bool { return errors.Is(r.err, target) }

// Writer returns a writer that redacts, with [String], each write before
// passing it to w: a logger writing one line per write (zap) never prints
// a URL's password. A write is reported whole when w took its redaction.
func Writer(w io.Writer) io.Writer { return &writer{w: w} }

type writer struct{ w io.Writer }

func (r *writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
