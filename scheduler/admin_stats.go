package scheduler

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
)

// DefaultStatsWindow is the window of stats when the request names none.
const DefaultStatsWindow = 5 * time.Minute

func (a *Admin) stats(ctx context.Context, data []byte) (any, error) {
	var req StatsRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	window := DefaultStatsWindow
	if req.Window != "" {
		d, err := time.ParseDuration(req.Window)
		if err != nil || d < time.Second {
			return nil, badRequest(`"window" %q is not a Go duration of at least 1s, such as "5m"`, req.Window)
		}
		window = d
	}
	reply := &StatsReply{Window: kv.Duration(window), States: map[kv.State]int{}}
	for p := range streams.Priorities {
		b, err := a.bucketState(ctx, p)
		if err != nil {
			return nil, err
		}
		reply.Buckets = append(reply.Buckets, b)
	}
	runTimes := make([][]time.Duration, streams.Priorities)
	since := time.Now().Add(-window)
	err := a.scan(ctx, func(r *kv.Record) {
		reply.Records++
		reply.States[r.State]++
		if r.Priority < 0 || r.Priority >= streams.Priorities {
			return
		}
		b := &reply.Buckets[r.Priority]
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
		if r.StartedAt != nil {
			runTimes[r.Priority] = append(runTimes[r.Priority], r.FinishedAt.Sub(*r.StartedAt))
		}
	})
	if err != nil {
		return nil, err
	}
	secs := window.Seconds()
	for p := range reply.Buckets {
		b := &reply.Buckets[p]
		b.SubmittedRate /= secs
		b.SucceededRate /= secs
		b.DeadRate /= secs
		b.Samples = len(runTimes[p])
		b.P50, b.P99, b.RecommendedTimeout = percentiles(runTimes[p])
	}
	dlq, err := a.js.Stream(ctx, a.cfg.Names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("bind dead-letter stream: %w", err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream info: %w", err)
	}
	reply.DLQ = info.State.Msgs
	return reply, nil
}

// bucketState reads a bucket's depth, capacity and in-flight count.
func (a *Admin) bucketState(ctx context.Context, p int) (BucketStats, error) {
	name := a.cfg.Names.PriorityStream(p)
	b := BucketStats{Priority: p, Stream: name}
	stream, err := a.js.Stream(ctx, name)
	if err != nil {
		return b, fmt.Errorf("bind stream %s: %w", name, err)
	}
	info := stream.CachedInfo()
	b.Depth, b.Capacity = info.State.Msgs, info.Config.MaxMsgs
	consumers := stream.ListConsumers(ctx)
	for c := range consumers.Info() {
		b.InFlight += c.NumAckPending
	}
	if err := consumers.Err(); err != nil {
		return b, fmt.Errorf("list consumers of %s: %w", name, err)
	}
	return b, nil
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

func (a *Admin) workers(ctx context.Context, data []byte) (any, error) {
	if err := decode(data, &struct{}{}); err != nil {
		return nil, err
	}
	members, err := kv.ListMembers(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, err
	}
	if members == nil {
		members = []kv.Member{}
	}
	return &WorkersReply{Workers: members}, nil
}
