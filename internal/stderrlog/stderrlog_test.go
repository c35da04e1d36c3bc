package stderrlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The default logger writes warnings and errors as JSON lines, and nothing
// below a warning.
func TestWritesWarningsAndErrors(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := newTo(zapcore.AddSync(&buf)).Named("worker")
	log.Debug("debug")
	log.Info("info")
	log.Warn("server unreachable", zap.String("stream", "AX_P0"))
	log.Error("settle failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.Equal(t, "warn", first["level"])
	require.Equal(t, "worker", first["logger"])
	require.Equal(t, "server unreachable", first["msg"])
	require.Equal(t, "AX_P0", first["stream"])
	require.Contains(t, lines[1], `"level":"error"`)
}

// New is the same logger on standard error.
func TestNewIsEnabledAtWarn(t *testing.T) {
	t.Parallel()
	core := New().Core()
	require.True(t, core.Enabled(zapcore.WarnLevel))
	require.False(t, core.Enabled(zapcore.InfoLevel))
}
