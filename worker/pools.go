package worker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// PoolTable holds one [ShardTable] per task type on a pools deployment,
// under control.PoolTableKey ([control.PoolTable]).
type PoolTable = control.PoolTable

// types returns the task types the worker serves (the types of its sets).
func (in *intake) types() []string {
	out := make([]string, 0, len(in.sets))
	for _, s := range in.sets {
		out = append(out, s.typ)
	}
	return out
}

// serveFixed serves the fixed [Config.Shards] in every set.
func (in *intake) serveFixed(ctx context.Context) error {
	return in.serveAll(ctx, in.cfg.Shards, nil)
}

// membersOf returns the sorted ids of the live members that serve
// taskType.
func (v *meshView) membersOf(taskType string) []string {
	var out []string
	for id, p := range v.live {
		if slices.Contains(p.types, taskType) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// reconcilePools writes new tables for the worker's types whose live
// members differ from their table's, then serves the shards each type's
// table gives this worker. It reports whether the shards it serves changed.
func (in *intake) reconcilePools(ctx context.Context, board jetstream.KeyValue, v *meshView) bool {
	next := PoolTable{Types: maps.Clone(v.pools.Types)}
	if next.Types == nil {
		next.Types = map[string]ShardTable{}
	}
	changed := false
	for _, s := range in.sets {
		live := v.membersOf(s.typ)
		cur := next.Types[s.typ]
		if !slices.Equal(live, cur.Members) {
			next.Types[s.typ] = ShardTable{Members: live, Owners: Rebalance(cur.Owners, live), At: time.Now().UTC()}
			changed = true
		}
	}
	if changed {
		if rev, ok := in.writeTable(ctx, board, control.PoolTableKey, next, v.tableRev); ok {
			in.log.Info("pool_table_written", zap.Strings("types", in.types()), zap.Uint64("revision", rev))
			v.pools, v.tableRev = next, rev
		}
	}
	owners := make(map[string]Assignment, len(in.sets))
	for _, s := range in.sets {
		owners[s.typ] = v.pools.Types[s.typ].Owners
	}
	if v.applied && maps.Equal(v.appliedPools, owners) {
		return false
	}
	for _, s := range in.sets {
		mine := owners[s.typ].Shards(in.cfg.ID)
		if err := in.serveShards(ctx, s, mine, nil); err != nil {
			if ctx.Err() == nil {
				in.log.Warn("serve_shards_failed", zap.String("type", s.typ), zap.Error(err))
			}
			return false // try again on the next event or tick
		}
		in.log.Info("shards_served", zap.String("type", s.typ), zap.Ints("owned", mine), zap.Uint64("table_revision", v.tableRev))
	}
	in.markServing(ctx)
	v.appliedPools, v.applied = owners, true
	return true
}

// markServing closes in.serving once, when the first requests of the
// shards served have been sent (only the mesh loop calls it).
func (in *intake) markServing(ctx context.Context) {
	select {
	case <-in.serving:
	default:
		in.awaitPulls(ctx)
		close(in.serving)
	}
}
