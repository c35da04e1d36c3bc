package dashboard

import (
	"testing"

	"github.com/ax-mesh/ax/internal/stderrlog/stderrlogtest"
	"go.uber.org/zap"
)

// A config that names no logger gets one that writes warnings and errors
// (internal/stderrlog), not a no-op; zap.NewNop() is kept.
func TestDefaultLoggerWritesWarnings(t *testing.T) {
	t.Parallel()
	stderrlogtest.RequireDefaults(t, map[string]stderrlogtest.DefaultsFunc{
		"Config": func(log *zap.Logger) *zap.Logger { return (&Config{Logger: log}).withDefaults().Logger },
	})
}
