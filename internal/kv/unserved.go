package kv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Unserved is a task type with messages waiting in the priority buckets and
// no live worker that serves it: on a pools deployment no live worker of its
// pool, on the default layout no live worker with a handler for it.
type Unserved struct {
	Type   string    `json:"type"`
	Depth  uint64    `json:"depth"`  // messages of the type in all buckets
	Oldest time.Time `json:"oldest"` // store time of its oldest message
	// Deadline is the operator's deadline for the type (AX_CONTROL
	// "unserved-deadlines"), after which its waiting tasks are
	// dead-lettered; zero when none is set. UnservedTypes leaves it zero:
	// the management API's stats fill it in.
	Deadline Duration `json:"deadline,omitempty"`
}

// UnservedTypes lists the task types that wait in the priority buckets with
// no live member serving them ([ServedTypes]), by type. It is nil when a
// live member does not say which types it handles (a worker of an earlier
// release on a deployment without pools).
func UnservedTypes(ctx context.Context, js jetstream.JetStream, names streams.Names) ([]Unserved, error) {
	first, err := js.Stream(ctx, names.PriorityStream(0))
	if err != nil {
		return nil, fmt.Errorf("unserved types: %w", err)
	}
	members, err := ListMembers(ctx, js, names)
	if err != nil {
		return nil, fmt.Errorf("unserved types: %w", err)
	}
	return UnservedAmong(ctx, js, names, members, streams.LayoutOf(first.CachedInfo().Config))
}

// MaxReportedUnserved bounds the types of a deployment without pools that
// [UnservedAmong] looks at: the types live workers put back for want of a
// handler ([Member.Unhandled]), which a producer chooses.
const MaxReportedUnserved = 100

// UnservedAmong is [UnservedTypes] for a caller that has read the live
// members and the deployment's layout. On a pools deployment it reads each bucket's subject counts (one
// stream info request with a subject filter, whose answer grows with the
// distinct subjects stored: tenants × types × keys) and, per unserved type
// and bucket, the first message of the type (a direct get by subject). On
// a deployment without pools, where every worker receives every type, the
// types to look at are those the live workers put back lately
// ([Member.Unhandled]), at most [MaxReportedUnserved] of them, and each is
// read with the type in the subject filter.
func UnservedAmong(ctx context.Context, js jetstream.JetStream, names streams.Names, members []Member, layout streams.Layout) ([]Unserved, error) {
	served, all := ServedTypes(members, layout)
	if all {
		return nil, nil
	}
	if layout == streams.LayoutPools {
		return WaitingTypes(ctx, js, names, served)
	}
	candidates := map[string]bool{}
	for _, m := range members {
		for _, t := range m.Unhandled {
			if !served[t] {
				candidates[t] = true
			}
		}
	}
	types := slices.Sorted(maps.Keys(candidates))
	return waitingOf(ctx, js, names, types[:min(len(types), MaxReportedUnserved)])
}

// waitingOf reads the depth and oldest message of each of types in the
// buckets; a type with no message waiting is left out.
func waitingOf(ctx context.Context, js jetstream.JetStream, names streams.Names, types []string) ([]Unserved, error) {
	out := []Unserved{}
	for _, t := range types {
		u := Unserved{Type: t}
		for p := range streams.Priorities {
			stream, err := js.Stream(ctx, names.PriorityStream(p))
			if err != nil {
				return nil, fmt.Errorf("unserved types: %w", err)
			}
			filter := names.StoredTypeFilter(p, t)
			info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				return nil, fmt.Errorf("unserved types: info %s: %w", names.PriorityStream(p), err)
			}
			n := uint64(0)
			for _, c := range info.State.Subjects {
				n += c
			}
			if n == 0 {
				continue
			}
			u.Depth += n
			msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // acked since
			}
			if err != nil {
				return nil, fmt.Errorf("unserved types: oldest %s in %s: %w", t, names.PriorityStream(p), err)
			}
			if u.Oldest.IsZero() || msg.Time.Before(u.Oldest) {
				u.Oldest = msg.Time
			}
		}
		if u.Depth > 0 {
			out = append(out, u)
		}
	}
	return out, nil
}

// WaitingTypes is [UnservedTypes] for a caller that has read the live
// members already: it lists the types with messages in the buckets that
// are not in served.
func WaitingTypes(ctx context.Context, js jetstream.JetStream, names streams.Names, served map[string]bool) ([]Unserved, error) {
	byType := map[string]*Unserved{}
	for p := range streams.Priorities {
		stream, err := js.Stream(ctx, names.PriorityStream(p))
		if err != nil {
			return nil, fmt.Errorf("unserved types: %w", err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(names.StoredFilter(p)))
		if err != nil {
			return nil, fmt.Errorf("unserved types: info %s: %w", names.PriorityStream(p), err)
		}
		waiting := map[string]bool{}
		for subject, n := range info.State.Subjects {
			// A subject ParseStored refuses (a token of control characters
			// or over 256 bytes) names no type a worker could register.
			stored, err := names.ParseStored(subject)
			if err != nil || served[stored.Type] {
				continue
			}
			t := stored.Type
			if byType[t] == nil {
				byType[t] = &Unserved{Type: t}
			}
			byType[t].Depth += n
			waiting[t] = true
		}
		for t := range waiting {
			msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(names.StoredTypeFilter(p, t)))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // acked since
			}
			if err != nil {
				return nil, fmt.Errorf("unserved types: oldest %s in %s: %w", t, names.PriorityStream(p), err)
			}
			if u := byType[t]; u.Oldest.IsZero() || msg.Time.Before(u.Oldest) {
				u.Oldest = msg.Time
			}
		}
	}
	out := make([]Unserved, 0, len(byType))
	for _, u := range byType {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Unserved) int { return strings.Compare(a.Type, b.Type) })
	return out, nil
}
