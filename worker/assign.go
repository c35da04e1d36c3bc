package worker

import (
	"cmp"
	"github.com/ax-mesh/ax/control"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/ax-mesh/ax/internal/streams"
)

// Assignment maps each shard to the id of the worker that owns it; "" means
// no owner ([control.Assignment]).
type Assignment = control.Assignment

// Rebalance returns the assignment of the shards to members that keeps as
// many shards of prev with their owner as a balanced assignment allows.
//
// It is a pure function of (prev, the set of members): every worker that
// reads the same previous table and sees the same members computes the same
// owners. The result is balanced: each member owns ⌊32/n⌋ or ⌈32/n⌉ shards.
// From a balanced prev (every result of Rebalance is one):
//   - removing members moves only the shards the removed members owned,
//     because each survivor's quota can only grow and the larger quotas go
//     to the members that already own more;
//   - adding one member moves exactly the shards it receives, its quota of
//     ⌊32/n⌋ or ⌈32/n⌉.
//
// Which shards move and where they land is decided by rendezvous scores
// (FNV-1a of member and shard), so the spread does not depend on the order
// in which members joined.
func Rebalance(prev Assignment, members []string) Assignment {
	ids := slices.Clone(members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var next Assignment
	if len(ids) == 0 {
		return next
	}
	owned := make(map[string][]int, len(ids))
	for _, id := range ids {
		owned[id] = nil
	}
	var pool []int // shards without a live owner
	for s, owner := range prev {
		if _, live := owned[owner]; live {
			owned[owner] = append(owned[owner], s)
		} else {
			pool = append(pool, s)
		}
	}
	// Quotas: the extra shards of an uneven split go to the members that
	// own the most already, so that no survivor of a removal must give any.
	byLoad := slices.Clone(ids)
	slices.SortStableFunc(byLoad, func(a, b string) int { return cmp.Compare(len(owned[b]), len(owned[a])) })
	base, extra := streams.Shards/len(ids), streams.Shards%len(ids)
	quota := make(map[string]int, len(ids))
	for i, id := range byLoad {
		quota[id] = base
		if i < extra {
			quota[id]++
		}
	}
	// Members above quota give up their lowest-scoring shards.
	for _, id := range ids {
		shards := owned[id]
		if over := len(shards) - quota[id]; over > 0 {
			slices.SortFunc(shards, func(a, b int) int { return cmp.Compare(score(id, a), score(id, b)) })
			pool = append(pool, shards[:over]...)
			owned[id] = shards[over:]
		}
	}
	for _, id := range ids {
		for _, s := range owned[id] {
			next[s] = id
		}
	}
	// Each free shard goes to the member below quota that scores it highest.
	slices.Sort(pool)
	for _, s := range pool {
		var best string
		for _, id := range ids {
			if len(owned[id]) < quota[id] && (best == "" || score(id, s) > score(best, s)) {
				best = id
			}
		}
		owned[best] = append(owned[best], s)
		next[s] = best
	}
	return next
}

// score is the rendezvous weight of shard s for member id.
func score(id string, s int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(s)))
	// FNV-1a mixes short, similar inputs poorly; finish with splitmix64.
	x := h.Sum64()
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
