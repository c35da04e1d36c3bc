package kv

import (
	"context"

	"github.com/ax-mesh/ax/control"
	"github.com/nats-io/nats.go/jetstream"
)

// The mesh's limits and pauses are AX_CONTROL's: their schema, reader and
// checks are in package control ([control.Limits]). These names keep the
// store's callers compiling.
type (
	// Limit is [control.Limit].
	Limit = control.Limit
	// Pause is [control.Pause].
	Pause = control.Pause
	// Limits is [control.Limits].
	Limits = control.Limits
)

// LimitsKey is [control.LimitsKey].
const LimitsKey = control.LimitsKey

// Prefixes of a limit or pause target that is not a task type
// ([control.TenantTargetPrefix], [control.KeyTargetPrefix]).
const (
	TenantTargetPrefix = control.TenantTargetPrefix
	KeyTargetPrefix    = control.KeyTargetPrefix
)

// Bounds of a limit ([control.MaxConcurrencyLimit]).
const (
	MaxConcurrencyLimit = control.MaxConcurrencyLimit
	MaxRateLimit        = control.MaxRateLimit
	MaxWeight           = control.MaxWeight
)

// ErrBadTarget is [control.ErrBadTarget].
var ErrBadTarget = control.ErrBadTarget

// ParseTarget is [control.ParseTarget].
func ParseTarget(target string, pause bool) (kind, name string, err error) {
	return control.ParseTarget(target, pause)
}

// ReadLimits is [control.ReadLimits].
func ReadLimits(ctx context.Context, board jetstream.KeyValue) (Limits, uint64, error) {
	return control.ReadLimits(ctx, board)
}

// DecodeLimits is [control.DecodeLimits].
func DecodeLimits(data []byte) (Limits, error) { return control.DecodeLimits(data) }

// MatchKey is [control.MatchKey].
func MatchKey(pattern, key string) bool { return control.MatchKey(pattern, key) }
