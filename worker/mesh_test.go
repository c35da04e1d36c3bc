package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// memberTTL keeps membership tests short: renewals every second.
const memberTTL = 4 * time.Second

// waitMembers waits until exactly ids are members and their announced
// shards split the 32 shards between them evenly, and returns the members.
func waitMembers(t *testing.T, js jetstream.JetStream, ids ...string) []kv.Member {
	t.Helper()
	slices.Sort(ids)
	var members []kv.Member
	require.Eventually(t, func() bool {
		ms, err := kv.ListMembers(context.Background(), js, streams.Names{})
		if err != nil {
			return false
		}
		members = ms
		var got []string
		seen := map[int]string{}
		lo, hi := streams.Shards/max(1, len(ids)), (streams.Shards+len(ids)-1)/max(1, len(ids))
		for _, m := range ms {
			got = append(got, m.ID)
			if len(m.Shards) < lo || len(m.Shards) > hi {
				return false // announcements still catching up with the table
			}
			for _, s := range m.Shards {
				if _, dup := seen[s]; dup {
					return false
				}
				seen[s] = m.ID
			}
		}
		return slices.Equal(got, ids) && len(seen) == streams.Shards
	}, 30*time.Second, 50*time.Millisecond, "want members %v splitting all shards; last: %+v", ids, members)
	return members
}

// Workers announce themselves with their shards; a clean stop leaves the
// mesh at once and a dead worker leaves when its lease expires; each time
// the survivors split all 32 shards, and only the leaver's shards move.
func TestMembershipAndOwnership(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	wA, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Concurrency: 3, Version: "1.2.3"})
	members := waitMembers(t, b.JS, "A")
	require.Equal(t, 3, members[0].Concurrency)
	require.Equal(t, "1.2.3", members[0].Version)
	require.NotEmpty(t, members[0].Host)

	b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL})
	_, ncC := b.StartWorker(t, worker.Config{ID: "C", MemberTTL: memberTTL})
	three := waitMembers(t, b.JS, "A", "B", "C")
	for _, m := range three {
		require.GreaterOrEqual(t, len(m.Shards), 10)
		require.LessOrEqual(t, len(m.Shards), 11)
	}
	owners := func(ms []kv.Member) map[int]string {
		out := map[int]string{}
		for _, m := range ms {
			for _, s := range m.Shards {
				out[s] = m.ID
			}
		}
		return out
	}
	before := owners(three)

	require.NoError(t, wA.Stop(ctx)) // clean stop: gone at once, well before its TTL
	stopped := time.Now()
	after := owners(waitMembers(t, b.JS, "B", "C"))
	require.Less(t, time.Since(stopped), memberTTL, "a stopped worker must deregister, not expire")
	for s, owner := range before {
		if owner != "A" {
			require.Equal(t, owner, after[s], "shard %d moved from %s although A left", s, owner)
		}
	}

	ncC.Close() // C dies: no release, its lease expires
	waitMembers(t, b.JS, "B")
}

// The shard table a worker follows is the one in AX_CONTROL, and it is the
// Rebalance of the previous one.
func TestShardTableIsShared(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL})
	waitMembers(t, b.JS, "A")
	b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL})
	members := waitMembers(t, b.JS, "A", "B")

	board, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	entry, err := board.Get(ctx, control.ShardTableKey)
	require.NoError(t, err)
	var table worker.ShardTable
	require.NoError(t, json.Unmarshal(entry.Value(), &table))
	require.Equal(t, []string{"A", "B"}, table.Members)
	var all worker.Assignment
	for s := range all {
		all[s] = "A"
	}
	require.Equal(t, worker.Rebalance(all, []string{"A", "B"}), table.Owners)
	for _, m := range members {
		require.Equal(t, table.Owners.Shards(m.ID), m.Shards)
	}
}

// TestJoinerSeesAMemberRenewing: a joining worker counts a member whose
// lease is being renewed while it reads the members. nats.go's watcher can
// mark the end of the current values before such a key; the joiner then
// wrote a table without that member, moving its shards away.
func TestJoinerSeesAMemberRenewing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	members, err := b.JS.KeyValue(ctx, "AX_WORKERS")
	require.NoError(t, err)
	board, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)

	// Z: a member renewing as fast as it can, without a worker behind it.
	data, err := json.Marshal(kv.Member{ID: "Z"})
	require.NoError(t, err)
	lease, err := json.Marshal(kv.LeaseRecord{Holder: "Z", TTL: kv.Duration(memberTTL), Data: data})
	require.NoError(t, err)
	rev, err := members.Create(ctx, "Z", lease)
	require.NoError(t, err)
	renewing := make(chan error, 1)
	go func() {
		var err error
		for ctx.Err() == nil {
			if rev, err = members.Update(ctx, "Z", lease, rev); err != nil && ctx.Err() == nil {
				renewing <- err
				return
			}
		}
		renewing <- nil
	}()

	tables, err := board.Watch(ctx, control.ShardTableKey, jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = kv.StopWatch(tables) }()
	ids := []string{"A", "B", "C", "D", "E", "F"}
	for i, id := range ids {
		b.StartWorker(t, worker.Config{ID: id, MemberTTL: memberTTL})
		want := append([]string{id}, ids[:i]...)
		want = append(want, "Z")
		slices.Sort(want)
		deadline := time.After(20 * time.Second)
		for done := false; !done; {
			select {
			case e := <-tables.Updates():
				var table worker.ShardTable
				require.NoError(t, json.Unmarshal(e.Value(), &table))
				require.Contains(t, table.Members, "Z", "the table written when %s joined (revision %d)", id, e.Revision())
				done = slices.Equal(table.Members, want)
			case <-deadline:
				t.Fatalf("no table with %v", want)
			}
		}
	}
	cancel()
	require.NoError(t, <-renewing)
}
