package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultStatsWindow is the window of stats when the request names none.
const DefaultStatsWindow = 5 * time.Minute

func (a *Service) stats(ctx context.Context, data []byte) (any, error) {
	var req StatsRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	window, err := statsWindow(req.Window)
	if err != nil {
		return nil, err
	}
	reply := &StatsReply{Window: kv.Duration(window), States: map[kv.State]int{}}
	for p := range streams.Priorities {
		b, tenants, err := a.bucketState(ctx, p)
		if err != nil {
			return nil, err
		}
		reply.Buckets = append(reply.Buckets, b)
		reply.Tenants = append(reply.Tenants, tenants...)
	}
	slices.SortStableFunc(reply.Tenants, func(x, y TenantQueue) int {
		return cmp.Or(cmp.Compare(x.Priority, y.Priority), cmp.Compare(y.Waiting, x.Waiting), strings.Compare(x.Tenant, y.Tenant))
	})
	limits, err := a.readLimits(ctx)
	if err != nil {
		return nil, err
	}
	if len(limits.Limits) > 0 || len(limits.Paused) > 0 {
		reply.Limits = limits
	}
	if err := a.tallyRecords(ctx, reply, window, waitingCounter(reply.Limits)); err != nil {
		return nil, err
	}
	if reply.DLQ, err = a.dlqDepth(ctx); err != nil {
		return nil, err
	}
	if reply.Reconciler, err = a.reconcilerReport(ctx); err != nil {
		return nil, err
	}
	if reply.Rejects, err = a.rejectsReport(ctx); err != nil {
		return nil, err
	}
	if reply.Unserved, err = kv.UnservedTypes(ctx, a.js, a.cfg.Names); err != nil {
		return nil, err
	}
	if len(reply.Unserved) > 0 {
		if err := a.unservedDeadlines(ctx, reply.Unserved); err != nil {
			return nil, err
		}
	}
	a.cutStats(reply)
	return reply, nil
}

// cutStats keeps a stats reply within the reply budget: if its lists do not
// fit, it keeps the deepest unserved types (in at most half the room), then
// the task types with the most tasks finished in the window, and counts
// the others (UnservedOmitted, TypesOmitted); the unreadable records'
// errors are cut the same way. Both lists stay sorted by type.
func (a *Service) cutStats(reply *StatsReply) {
	types, unserved := reply.Types, reply.Unserved
	var unreadable map[string]string
	if reply.Unreadable != nil {
		unreadable = reply.Unreadable.Errors
		reply.Unreadable.Errors = map[string]string{}
	}
	reply.Types, reply.Unserved = []TypeStats{}, nil
	room := a.roomFor(reply)
	if reply.Unreadable != nil {
		reply.Unreadable.Errors = unreadable
		dropped, used := fitMap(unreadable, room/4)
		reply.Unreadable.Omitted, room = dropped, room-used
		reply.Truncated = dropped > 0
	}
	slices.SortFunc(unserved, func(x, y kv.Unserved) int {
		return cmp.Or(cmp.Compare(y.Depth, x.Depth), strings.Compare(x.Type, y.Type))
	})
	n, used := fit(unserved, room/2)
	slices.SortFunc(types, func(x, y TypeStats) int {
		return cmp.Or(cmp.Compare(y.Succeeded+y.Dead, x.Succeeded+x.Dead), strings.Compare(x.Type, y.Type))
	})
	m, _ := fit(types, room-used)
	reply.Unserved, reply.Types = unserved[:n], types[:m]
	reply.UnservedOmitted, reply.TypesOmitted = len(unserved)-n, len(types)-m
	reply.Truncated = reply.Truncated || reply.UnservedOmitted > 0 || reply.TypesOmitted > 0
	if len(reply.Unserved) == 0 {
		reply.Unserved = nil
	}
	slices.SortFunc(reply.Unserved, func(x, y kv.Unserved) int { return strings.Compare(x.Type, y.Type) })
	slices.SortFunc(reply.Types, func(x, y TypeStats) int { return strings.Compare(x.Type, y.Type) })
}

// statsWindow parses the window of a stats request; empty is
// [DefaultStatsWindow].
func statsWindow(raw string) (time.Duration, error) {
	if raw == "" {
		return DefaultStatsWindow, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < time.Second {
		return 0, badRequest(`"window" %q is not a Go duration of at least 1s, such as "5m"`, raw)
	}
	return d, nil
}

// tallyRecords scans every record into reply: the count per state, and per
// bucket and per type the rates and run times of the tasks submitted or
// finished within window; each record is also given to also, if not nil.
func (a *Service) tallyRecords(ctx context.Context, reply *StatsReply, window time.Duration, also func(*kv.Record)) error {
	runTimes := make([][]time.Duration, streams.Priorities)
	bound := make([]uint64, streams.Priorities) // unfinished records bound to a bucket's message
	types := map[string]*typeTally{}
	since := time.Now().Add(-window)
	var err error
	reply.Unreadable, err = a.scan(ctx, func(r *kv.Record) {
		if also != nil {
			also(r)
		}
		reply.Records++
		reply.States[r.State]++
		if r.Priority < 0 || r.Priority >= streams.Priorities {
			return
		}
		b := &reply.Buckets[r.Priority]
		if !r.State.Terminal() && r.Stream == b.Stream {
			bound[r.Priority]++
		}
		if r.CreatedAt.After(since) {
			b.SubmittedRate++
		}
		if r.FinishedAt == nil || r.FinishedAt.Before(since) {
			return
		}
		switch r.State {
		case kv.StateSucceeded:
			b.SucceededRate++
		case kv.StateDead:
			b.DeadRate++
		default:
			return
		}
		t := types[r.Type]
		if t == nil {
			t = &typeTally{stats: TypeStats{Type: r.Type}}
			types[r.Type] = t
		}
		t.add(r)
		if r.StartedAt != nil {
			runTimes[r.Priority] = append(runTimes[r.Priority], r.FinishedAt.Sub(*r.StartedAt))
		}
	})
	if err != nil {
		return err
	}
	secs := window.Seconds()
	for p := range reply.Buckets {
		b := &reply.Buckets[p]
		if b.Depth > bound[p] {
			b.Unrecorded = b.Depth - bound[p]
			reply.States[kv.StateReady] += int(b.Unrecorded)
		}
		b.SubmittedRate /= secs
		b.SucceededRate /= secs
		b.DeadRate /= secs
		b.Samples = len(runTimes[p])
		b.P50, b.P99, b.RecommendedTimeout = percentiles(runTimes[p])
	}
	reply.Types = make([]TypeStats, 0, len(types))
	for _, t := range types {
		t.stats.Samples = len(t.runTimes)
		t.stats.P50, t.stats.P99, t.stats.RecommendedTimeout = percentiles(t.runTimes)
		reply.Types = append(reply.Types, t.stats)
	}
	slices.SortFunc(reply.Types, func(x, y TypeStats) int { return strings.Compare(x.Type, y.Type) })
	return nil
}

// dlqDepth returns the number of dead letters.
func (a *Service) dlqDepth(ctx context.Context) (uint64, error) {
	dlq, err := a.js.Stream(ctx, a.cfg.Names.DLQStream())
	if err != nil {
		return 0, fmt.Errorf("bind dead-letter stream: %w", err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("dead-letter stream info: %w", err)
	}
	return info.State.Msgs, nil
}

// rejectsReport reads the leader's rejected-submit report from AX_CONTROL,
// or nil when no leader wrote one yet.
func (a *Service) rejectsReport(ctx context.Context) (*control.RejectsReport, error) {
	var r control.RejectsReport
	ok, err := a.controlReport(ctx, control.RejectsKey, &r)
	if !ok || err != nil {
		return nil, err
	}
	return &r, nil
}

// reconcilerReport reads the leader reconciler's report from AX_CONTROL,
// or nil when no leader wrote one yet.
func (a *Service) reconcilerReport(ctx context.Context) (*control.ReconcilerReport, error) {
	var r control.ReconcilerReport
	ok, err := a.controlReport(ctx, control.ReconcilerKey, &r)
	if !ok || err != nil {
		return nil, err
	}
	return &r, nil
}

// controlReport decodes the report under key in AX_CONTROL into v; false
// when no leader wrote one yet.
func (a *Service) controlReport(ctx context.Context, key string, v any) (bool, error) {
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return false, fmt.Errorf("bind board bucket: %w", err)
	}
	entry, err := board.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s report: %w", key, err)
	}
	if err := json.Unmarshal(entry.Value(), v); err != nil {
		return false, fmt.Errorf("decode %s report: %w", key, err)
	}
	return true, nil
}

// typeTally accumulates the finished tasks of one type.
type typeTally struct {
	stats    TypeStats
	runTimes []time.Duration
}

func (t *typeTally) add(r *kv.Record) {
	if r.State == kv.StateSucceeded {
		t.stats.Succeeded++
	} else {
		t.stats.Dead++
	}
	if r.Attempt > 1 {
		t.stats.Retried++
	}
	for _, m := range r.Trail {
		if m.TimedOut {
			t.stats.TimedOut++
			break
		}
	}
	t.stats.Timeout = max(t.stats.Timeout, r.Timeout)
	if r.StartedAt != nil {
		t.runTimes = append(t.runTimes, r.FinishedAt.Sub(*r.StartedAt))
	}
}

// bucketState reads a bucket's depth, capacity and in-flight count, and
// on a fair deployment each tenant's queue in it (those with tasks).
func (a *Service) bucketState(ctx context.Context, p int) (BucketStats, []TenantQueue, error) {
	name := a.cfg.Names.PriorityStream(p)
	b := BucketStats{Priority: p, Stream: name}
	stream, err := a.js.Stream(ctx, name)
	if err != nil {
		return b, nil, fmt.Errorf("bind stream %s: %w", name, err)
	}
	info := stream.CachedInfo()
	b.Depth, b.Capacity = info.State.Msgs, info.Config.MaxMsgs
	tenants, inFlight, err := streams.TenantQueues(ctx, stream, p)
	if err != nil {
		return b, nil, err
	}
	b.InFlight = inFlight
	return b, tenants, nil
}

// percentiles returns p50, p99 and the timeout they recommend: 1.5 x p99
// rounded up to the second.
func percentiles(d []time.Duration) (p50, p99, recommended kv.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(math.Ceil(q*float64(len(d))))-1)] }
	rec := time.Duration(math.Ceil(1.5*at(0.99).Seconds())) * time.Second
	return kv.Duration(at(0.50)), kv.Duration(at(0.99)), kv.Duration(max(rec, time.Second))
}

func (a *Service) workers(ctx context.Context, data []byte) (any, error) {
	if err := decode(data, &struct{}{}); err != nil {
		return nil, err
	}
	members, err := kv.ListMembers(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, err
	}
	reply := &WorkersReply{Workers: []kv.Member{}}
	n, _ := fit(members, a.roomFor(reply))
	reply.Workers = append(reply.Workers, members[:n]...)
	reply.Omitted = len(members) - n
	reply.Truncated = reply.Omitted > 0
	return reply, nil
}
