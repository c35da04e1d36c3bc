package worker_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"
)

func randomIDs(r *rand.Rand, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		switch r.IntN(3) {
		case 0:
			ids[i] = nuid.Next()
		case 1:
			ids[i] = fmt.Sprintf("host-%d", r.IntN(1000)) // short, similar ids
		default:
			ids[i] = fmt.Sprintf("w%d", i)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// joined builds an assignment the way a mesh does: members join one by one.
func joined(ids []string) worker.Assignment {
	var a worker.Assignment
	for i := range ids {
		a = worker.Rebalance(a, ids[:i+1])
	}
	return a
}

func requireBalanced(t *testing.T, a worker.Assignment, ids []string) {
	t.Helper()
	lo, hi := streams.Shards/len(ids), (streams.Shards+len(ids)-1)/len(ids)
	total := 0
	for _, id := range ids {
		n := len(a.Shards(id))
		require.True(t, n >= lo && n <= hi, "%s owns %d shards, want %d..%d: %v", id, n, lo, hi, a)
		total += n
	}
	require.Equal(t, streams.Shards, total, "every shard has a live owner: %v", a)
}

// Over 2,000 random member sets of 8: adding a 9th moves at most
// ceil(32/9)+1 shards, removing any one moves only its own shards, and every
// result is balanced and the same whatever the order of the member list.
func TestRebalanceMovesFewShards(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	limit := (streams.Shards+8)/9 + 1
	worst := 0
	for trial := range 2000 {
		ids := randomIDs(r, 8)
		for len(ids) < 8 {
			ids = append(ids, fmt.Sprintf("extra-%d-%d", trial, len(ids)))
		}
		var eight worker.Assignment
		if trial%2 == 0 {
			eight = worker.Rebalance(worker.Assignment{}, ids) // all at once
		} else {
			eight = joined(ids)
		}
		requireBalanced(t, eight, ids)
		shuffled := slices.Clone(ids)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		require.Equal(t, eight, worker.Rebalance(eight, shuffled), "a balanced assignment is a fixed point")

		nine := append(slices.Clone(ids), fmt.Sprintf("new-%s", nuid.Next()))
		grown := worker.Rebalance(eight, nine)
		requireBalanced(t, grown, nine)
		moved := eight.Moved(grown)
		worst = max(worst, moved)
		require.LessOrEqual(t, moved, limit, "adding %s to %v", nine[8], ids)
		require.Equal(t, moved, len(grown.Shards(nine[8])), "only shards for the newcomer move")

		for _, from := range []worker.Assignment{eight, grown} {
			members := ids
			if from == grown {
				members = nine
			}
			gone := members[r.IntN(len(members))]
			rest := slices.DeleteFunc(slices.Clone(members), func(id string) bool { return id == gone })
			shrunk := worker.Rebalance(from, rest)
			requireBalanced(t, shrunk, rest)
			for s := range from {
				if from[s] != gone {
					require.Equal(t, from[s], shrunk[s], "shard %d moved although %s left, not its owner %s", s, gone, from[s])
				}
			}
		}
	}
	t.Logf("worst join of a 9th member moved %d shards (limit %d)", worst, limit)
}

// Members in any number from 1 to 40 get a balanced share; beyond 32
// members some own nothing.
func TestRebalanceSizes(t *testing.T) {
	t.Parallel()
	var a worker.Assignment
	var ids []string
	for n := 1; n <= 40; n++ {
		ids = append(ids, fmt.Sprintf("w%02d", n))
		a = worker.Rebalance(a, ids)
		owners := map[string]int{}
		for _, o := range a {
			require.NotEmpty(t, o)
			owners[o]++
		}
		require.Len(t, owners, min(n, streams.Shards))
		for _, c := range owners {
			require.LessOrEqual(t, c, (streams.Shards+n-1)/n)
		}
	}
	require.Equal(t, worker.Assignment{}, worker.Rebalance(a, nil))
}
