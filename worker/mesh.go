package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ShardTable is the mesh's shared assignment, which AX_CONTROL holds under
// control.ShardTableKey ([control.ShardTable]).
type ShardTable = control.ShardTable

// awaitServing waits until the worker serves the shards the mesh gives it,
// for at most the member TTL (after that it keeps trying in the background).
func (in *intake) awaitServing(ctx context.Context) {
	timer := time.NewTimer(in.cfg.MemberTTL)
	defer timer.Stop()
	select {
	case <-in.serving:
	case <-ctx.Done():
	case <-timer.C:
		in.log.Warn("mesh_join_slow", zap.Duration("waited", in.cfg.MemberTTL))
	}
}

// meshEnd is why serveMesh returns err: once guarded has ended, its cause
// (the lease lost, [kv.ErrLeaseLost]), or nil if ctx ended, whatever failure
// the loop saw first. A lost lease ends guarded, and nats.go then closes the
// watchers made with it, so the loop's select may see a closed watcher
// ("watch shard table: closed") before guarded's end; reported as such, the
// loss was a mere failure and the running handlers went on (seen once in
// CI: TestLostMembershipStopsWork's handler ran to its timeout).
func meshEnd(ctx, guarded context.Context, err error) error {
	if err == nil || guarded.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(guarded)
}

// meshView is what a member knows of the mesh (owned by the mesh loop).
type meshView struct {
	live         map[string]peer // member ids with a live lease: what they serve
	liveReady    bool            // the initial member listing was read
	table        ShardTable      // without pools
	pools        PoolTable       // with pools
	tableRev     uint64          // of table or pools
	tableReady   bool            // the initial table was read
	lastApplied  Assignment
	lastAssist   []int // the shards assisted when lastApplied was applied
	appliedPools map[string]Assignment
	applied      bool
}

// serveMesh joins the mesh and serves until ctx ends (nil) or the
// membership is lost ([kv.ErrLeaseLost]). The lease is released on return.
func (in *intake) serveMesh(ctx context.Context, m *member) (err error) {
	in.announce(m)
	guarded, release, err := m.lease.Hold(ctx)
	if err != nil {
		return err
	}
	defer release()
	defer func() { err = meshEnd(ctx, guarded, err) }() // before release ends guarded
	members, err := in.js.KeyValue(guarded, in.cfg.Names.WorkersBucket())
	if err != nil {
		return fmt.Errorf("bind %s: %w", in.cfg.Names.WorkersBucket(), err)
	}
	board, err := control.Open(guarded, in.js, in.cfg.Names)
	if err != nil {
		return fmt.Errorf("bind %s: %w", in.cfg.Names.ControlBucket(), err)
	}
	// Listed before the watch: each listed member the watch has not
	// delivered by its initial-values mark is read then (kv.CatchUp), so
	// that a member renewing its lease meanwhile is not taken for gone.
	listed, err := kv.ListKeys(guarded, in.js, in.cfg.Names.WorkersBucket(), "")
	if err != nil {
		return fmt.Errorf("list members: %w", err)
	}
	memberWatch, err := members.WatchAll(guarded)
	if err != nil {
		return fmt.Errorf("watch members: %w", err)
	}
	defer func() { _ = kv.StopWatch(memberWatch) }()
	tableKey := control.ShardTableKey
	if in.layout == streams.LayoutPools {
		tableKey = control.PoolTableKey
	}
	tableWatch, err := board.Watch(guarded, tableKey)
	if err != nil {
		return fmt.Errorf("watch shard table: %w", err)
	}
	defer func() { _ = kv.StopWatch(tableWatch) }()

	v := &meshView{live: map[string]peer{}}
	delivered := map[string]bool{}         // members the watch delivered before its mark
	refresh := time.NewTicker(time.Second) // in-flight counts for the next renewal
	defer refresh.Stop()
	for {
		select {
		case <-guarded.Done():
			if ctx.Err() != nil {
				return nil
			}
			return context.Cause(guarded)
		case e, ok := <-memberWatch.Updates():
			if !ok {
				return fmt.Errorf("watch members: closed")
			}
			if e == nil {
				in.catchUp(guarded, members, listed, delivered, func(e jetstream.KeyValueEntry) { v.member(e, in.log) })
			} else if !v.liveReady {
				delivered[e.Key()] = true
			}
			v.member(e, in.log)
			in.peers.Store(v.peerHandles(in.cfg.ID))
		case e, ok := <-tableWatch.Updates():
			if !ok {
				return fmt.Errorf("watch shard table: closed")
			}
			// No catch-up as for the members: a table missed at the mark
			// comes on the watch, and one written meanwhile fails its
			// compare-and-set (and workers may not read AX_CONTROL).
			if in.layout == streams.LayoutPools {
				tableEntry(v, e, &v.pools, in.log)
			} else {
				tableEntry(v, e, &v.table, in.log)
			}
		case <-refresh.C: // also retries a failed switch
			in.announce(m) // the next renewal carries the in-flight count of now
		}
		if v.liveReady && v.tableReady && in.reconcileAny(guarded, board, v) {
			// Announce the new shards now rather than at the next renewal.
			in.announce(m)
			if _, err := m.lease.Renew(guarded); err != nil && guarded.Err() == nil {
				in.log.Warn("member_renew_failed", zap.Error(err))
			}
		}
	}
}

// catchUp applies, through apply, the current entry of each of listed the
// watch did not deliver before its initial-values mark ([kv.CatchUp]). A
// failed read is logged: the key's next update brings it.
func (in *intake) catchUp(ctx context.Context, bucket jetstream.KeyValue, listed []string, delivered map[string]bool, apply func(jetstream.KeyValueEntry)) {
	err := kv.CatchUp(ctx, bucket, listed, delivered, func(e jetstream.KeyValueEntry) error {
		apply(e)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		in.log.Warn("mesh_catch_up_failed", zap.String("bucket", bucket.Bucket()), zap.Error(err))
	}
}

func (v *meshView) member(e jetstream.KeyValueEntry, log *zap.Logger) {
	if e == nil {
		v.liveReady = true
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		var lease kv.LeaseRecord
		var rec kv.Member
		err := json.Unmarshal(e.Value(), &lease)
		if err == nil && lease.Holder != e.Key() {
			// Not a membership lease (every worker holds its own key): a
			// value ax did not write there, which no member renews and no
			// TTL expires. Counted live, it would be given shards that no
			// worker consumes; the worker of that id takes it over
			// (kv.Lease).
			if _, known := v.live[e.Key()]; known || v.liveReady {
				log.Warn("member_foreign_value_ignored", zap.String("member", e.Key()), zap.Uint64("revision", e.Revision()),
					zap.ByteString("value", e.Value()[:min(len(e.Value()), kv.ForeignValueLen)]))
			}
			delete(v.live, e.Key())
			return
		}
		if err == nil && len(lease.Data) > 0 {
			err = json.Unmarshal(lease.Data, &rec)
		}
		if err != nil {
			log.Debug("member_decode", zap.String("member", e.Key()), zap.Error(err))
		}
		v.live[e.Key()] = peer{types: rec.Types, handles: rec.Handles}
	} else {
		delete(v.live, e.Key())
	}
}

// tableEntry applies an update of the watched table key to dst: the
// catch-all [ShardTable], or the [PoolTable] of a pools deployment. A
// deleted or undecodable table reads as empty.
func tableEntry[T any](v *meshView, e jetstream.KeyValueEntry, dst *T, log *zap.Logger) {
	if e == nil {
		v.tableReady = true
		return
	}
	if e.Revision() < v.tableRev {
		return // our own write, already applied
	}
	v.tableRev = e.Revision()
	var empty T
	*dst = empty
	if e.Operation() == jetstream.KeyValuePut {
		if err := json.Unmarshal(e.Value(), dst); err != nil {
			log.Error("table_decode", zap.String("key", e.Key()), zap.Uint64("revision", e.Revision()), zap.Error(err))
			*dst = empty
		}
	}
}

// writeTable writes table under key by compare-and-set on the revision the
// worker last saw and reports its new revision, or false if another member
// wrote first (its table arrives on the watch), the worker is leaving, or
// the write failed (logged; the next event or tick tries again).
func (in *intake) writeTable(ctx context.Context, board jetstream.KeyValue, key string, table any, rev uint64) (uint64, bool) {
	data, err := json.Marshal(table)
	if err != nil {
		in.log.Error("table_encode", zap.String("key", key), zap.Error(err))
		return 0, false
	}
	wctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	next, err := board.Update(wctx, key, data, rev)
	switch {
	case err == nil:
		return next, true
	case kv.IsRevisionMismatch(err), ctx.Err() != nil:
	default:
		in.log.Warn("table_write_failed", zap.String("key", key), zap.Error(err))
	}
	return 0, false
}

// reconcileAny reconciles the worker's shards with the table of its
// deployment: the catch-all [ShardTable] or the per-type [PoolTable].
func (in *intake) reconcileAny(ctx context.Context, board jetstream.KeyValue, v *meshView) bool {
	if in.layout == streams.LayoutPools {
		return in.reconcilePools(ctx, board, v)
	}
	return in.reconcile(ctx, board, v)
}

// reconcile writes a new table if the live members differ from the table's,
// then serves the shards the table gives this worker. It reports whether
// the shards it serves changed.
func (in *intake) reconcile(ctx context.Context, board jetstream.KeyValue, v *meshView) bool {
	live := make([]string, 0, len(v.live))
	for id := range v.live {
		live = append(live, id)
	}
	slices.Sort(live)
	if !slices.Equal(live, v.table.Members) {
		next := ShardTable{Members: live, Owners: Rebalance(v.table.Owners, live), At: time.Now().UTC()}
		if rev, ok := in.writeTable(ctx, board, control.ShardTableKey, next, v.tableRev); ok {
			in.log.Info("shard_table_written", zap.Strings("members", live), zap.Int("moved", v.table.Owners.Moved(next.Owners)), zap.Uint64("revision", rev))
			v.table, v.tableRev = next, rev
		}
	}
	assist := in.assistShards(v)
	if v.applied && v.lastApplied == v.table.Owners && slices.Equal(v.lastAssist, assist) {
		return false
	}
	mine := v.table.Owners.Shards(in.cfg.ID)
	if err := in.serveAll(ctx, mine, assist); err != nil {
		if ctx.Err() == nil {
			in.log.Warn("serve_shards_failed", zap.Error(err))
		}
		return false // try again on the next event or tick
	}
	in.markServing(ctx)
	v.lastApplied, v.lastAssist, v.applied = v.table.Owners, assist, true
	in.log.Info("shards_served", zap.Ints("owned", mine), zap.Ints("assisted", assist), zap.Uint64("table_revision", v.tableRev))
	return true
}
