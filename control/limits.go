package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Prefixes of a limit or pause target that is not a task type.
const (
	TenantTargetPrefix = "tenant:"
	KeyTargetPrefix    = "key:"
)

// Bounds of a limit.
const (
	MaxConcurrencyLimit = 1_000_000
	MaxRateLimit        = 1_000_000
	MaxWeight           = 1_000
)

// ErrBadTarget means a limit or pause target is not a task type,
// "tenant:NAME" or "key:PATTERN".
var ErrBadTarget = errors.New("bad limit target")

// Limit bounds the tasks of one target mesh-wide. Zero fields bound
// nothing.
type Limit struct {
	// Concurrency is how many of the target's tasks may run at once.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is how many of the target's tasks may start per second.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many starts the rate allows at once after an idle
	// while: at most Rate + Burst starts in any second. Zero means 1.
	Burst int `json:"burst,omitempty"`
	// Weight is a share of a priority's starts on a worker, where the
	// groups of its deliveries take turns: a tenant's on a fair
	// deployment, a task type's on a pools deployment. In its turn a
	// target of weight W starts up to W of its tasks where one without a
	// weight starts one. It applies to a tenant or a type, not to a key
	// pattern, and bounds nothing: a limit of a weight alone parks no
	// task.
	Weight int `json:"weight,omitempty"`
}

// Pause is a paused type or tenant.
type Pause struct {
	At time.Time `json:"at"`
}

// Limits is what AX_CONTROL holds under [LimitsKey]. A target is a task
// type ("email"), a tenant ("tenant:acme") or, for limits only, a pattern
// of partition keys ("key:order-*", '*' matching any run of characters;
// every matching key shares the one limit).
type Limits struct {
	Limits map[string]Limit `json:"limits,omitempty"`
	Paused map[string]Pause `json:"paused,omitempty"`
}

// ParseTarget splits a target into its kind ("type", "tenant" or "key")
// and name, and checks it; a pause (pause true) takes no key pattern.
func ParseTarget(target string, pause bool) (kind, name string, err error) {
	switch {
	case strings.HasPrefix(target, TenantTargetPrefix):
		kind, name = "tenant", strings.TrimPrefix(target, TenantTargetPrefix)
	case strings.HasPrefix(target, KeyTargetPrefix):
		kind, name = "key", strings.TrimPrefix(target, KeyTargetPrefix)
		if pause {
			return "", "", fmt.Errorf("%w: %q: a pause names a task type or a tenant", ErrBadTarget, target)
		}
	default:
		kind, name = "type", target
	}
	check := name
	if kind == "key" {
		check = strings.ReplaceAll(name, "*", "x")
	}
	if err := streams.ValidateToken(kind, check); err != nil {
		return "", "", fmt.Errorf("%w: %q: %w (a task type, tenant:NAME or key:PATTERN)", ErrBadTarget, target, err)
	}
	return kind, name, nil
}

// Bounds reports whether l bounds its target's tasks (a concurrency or a
// rate); a weight alone bounds nothing.
func (l Limit) Bounds() bool { return l.Concurrency > 0 || l.Rate > 0 }

// ValidateFor checks a limit of a target of kind ("type", "tenant" or
// "key", as [ParseTarget] returns it): a key pattern takes no weight.
func (l Limit) ValidateFor(kind string) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Weight > 0 && kind == "key" {
		return errors.New("a weight is the share of a tenant or a task type, not of a key pattern")
	}
	return nil
}

// Validate checks a limit.
func (l Limit) Validate() error {
	switch {
	case l.Concurrency == 0 && l.Rate == 0 && l.Weight == 0:
		return errors.New("a limit needs a concurrency, a rate or a weight")
	case l.Concurrency < 0 || l.Concurrency > MaxConcurrencyLimit:
		return fmt.Errorf("concurrency %d: want 1..%d", l.Concurrency, MaxConcurrencyLimit)
	case l.Rate < 0 || l.Rate > MaxRateLimit:
		return fmt.Errorf("rate %g: want a positive number of starts per second, at most %d", l.Rate, MaxRateLimit)
	case l.Burst < 0 || l.Burst > MaxRateLimit:
		return fmt.Errorf("burst %d: want 0..%d", l.Burst, MaxRateLimit)
	case l.Burst > 0 && l.Rate == 0:
		return errors.New("a burst needs a rate")
	case l.Weight < 0 || l.Weight > MaxWeight:
		return fmt.Errorf("weight %d: want 1..%d (0: none)", l.Weight, MaxWeight)
	}
	return nil
}

// ReadLimits reads the [Limits] from the control bucket and its revision
// (0: never written).
func ReadLimits(ctx context.Context, board jetstream.KeyValue) (Limits, uint64, error) {
	entry, err := board.Get(ctx, LimitsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Limits{}, 0, nil
	}
	if err != nil {
		return Limits{}, 0, fmt.Errorf("read %s: %w", LimitsKey, err)
	}
	out, err := DecodeLimits(entry.Value())
	return out, entry.Revision(), err
}

// DecodeLimits decodes the value of [LimitsKey]. A value with a field ax
// does not write (a publish acknowledgement, {"stream":"AX_P2","seq":12},
// would otherwise decode as no limit and no pause) is [ErrForeignLimits]:
// a worker keeps the limits it last read, and the leader writes them back.
func DecodeLimits(data []byte) (Limits, error) {
	var out Limits
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return Limits{}, fmt.Errorf("decode %s: %w: %w", LimitsKey, ErrForeignLimits, err)
	}
	return out, nil
}

// Pauses reports whether l pauses the tasks of taskType or of tenant.
func (l *Limits) Pauses(taskType, tenant string) bool {
	if l == nil {
		return false
	}
	_, typePaused := l.Paused[taskType]
	_, tenantPaused := l.Paused[TenantTargetPrefix+tenant]
	return typePaused || tenantPaused
}

// Empty reports whether l limits and pauses nothing.
func (l *Limits) Empty() bool { return l == nil || (len(l.Limits) == 0 && len(l.Paused) == 0) }

// Targets returns the sorted targets of the limits.
func (l *Limits) Targets() []string { return slices.Sorted(maps.Keys(l.Limits)) }

// MatchKey reports whether the partition key matches pattern, where '*'
// matches any run of characters.
func MatchKey(pattern, key string) bool {
	first, rest, wild := strings.Cut(pattern, "*")
	if !wild {
		return pattern == key
	}
	if !strings.HasPrefix(key, first) {
		return false
	}
	key = key[len(first):]
	parts := strings.Split(rest, "*")
	last := parts[len(parts)-1]
	for _, p := range parts[:len(parts)-1] {
		i := strings.Index(key, p)
		if i < 0 {
			return false
		}
		key = key[i+len(p):]
	}
	return len(key) >= len(last) && strings.HasSuffix(key, last)
}
