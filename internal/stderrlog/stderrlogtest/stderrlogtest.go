// Package stderrlogtest holds the one check that a component's default
// logger is internal/stderrlog's. It imports no ax package, so the
// internal test files of every component (which cannot import
// internal/axtest: see its doc) use it.
package stderrlogtest

import (
	"testing"

	"github.com/ax-mesh/ax/internal/stderrlog"
	"go.uber.org/zap"
)

// DefaultsFunc applies a config's defaults to a config whose logger is
// log (nil: none named) and returns the logger the config ends with.
type DefaultsFunc func(log *zap.Logger) *zap.Logger

// RequireDefaults fails t unless every config of defaults (by name) that
// names no logger gets one that writes warnings and errors but nothing
// below ([stderrlog.Level]), not a no-op, and keeps a zap.NewNop() it is
// given.
func RequireDefaults(t *testing.T, defaults map[string]DefaultsFunc) {
	t.Helper()
	for name, apply := range defaults {
		core := apply(nil).Core()
		if !core.Enabled(stderrlog.Level) {
			t.Errorf("%s: the default logger does not write warnings", name)
		}
		if core.Enabled(stderrlog.Level - 1) {
			t.Errorf("%s: the default logger writes below warn", name)
		}
		if apply(zap.NewNop()).Core().Enabled(zap.ErrorLevel) {
			t.Errorf("%s: zap.NewNop() is replaced", name)
		}
	}
}
