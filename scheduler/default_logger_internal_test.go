package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// A config that names no logger gets one that writes warnings and errors
// (internal/stderrlog), not a no-op; zap.NewNop() is kept.
func TestDefaultLoggerWritesWarnings(t *testing.T) {
	t.Parallel()
	for name, log := range map[string]*zap.Logger{
		"Config":        (*Config)(nil).withDefaults().Logger,
		"ElectorConfig": (*ElectorConfig)(nil).withDefaults().Logger,
	} {
		require.True(t, log.Core().Enabled(zapcore.WarnLevel), "%s: the default logger does not write warnings", name)
		require.False(t, log.Core().Enabled(zapcore.InfoLevel), "%s: the default logger writes below warn", name)
	}
	nop := (&Config{Logger: zap.NewNop()}).withDefaults().Logger
	require.False(t, nop.Core().Enabled(zapcore.ErrorLevel), "zap.NewNop() is replaced")
}
