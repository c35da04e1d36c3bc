// Package stderrlog builds the logger the long-running parts of ax (the
// client, the worker, the leader, the management API and the dashboard)
// use when their Config names none: warnings and errors, as JSON lines on
// standard error, so that a process that embeds them is not silent through
// a server outage. A caller that wants silence passes zap.NewNop(). Every
// line passes through [redact.Writer]: no log shows a URL's password.
package stderrlog

import (
	"os"
	"time"

	"github.com/ax-mesh/ax/internal/redact"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Level is the lowest level the default logger writes.
const Level = zapcore.WarnLevel

// New returns the default logger: zap's production encoding (JSON, ISO 8601
// times, the caller) at [Level] on standard error, sampled as zap's
// production config samples (the first 100 entries of a message each second,
// then every 100th), so that an outage logged by many goroutines stays
// readable. It adds no stack traces: a warning names its operation and
// error.
func New() *zap.Logger {
	return newTo(zapcore.Lock(zapcore.AddSync(redact.Writer(os.Stderr))))
}

// newTo is [New] writing to w.
func newTo(w zapcore.WriteSyncer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), w, Level)
	core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(w))
}
