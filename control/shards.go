package control

import (
	"time"

	"github.com/ax-mesh/ax/internal/streams"
)

// Assignment maps each shard to the id of the worker that owns it; "" means
// no owner.
type Assignment [streams.Shards]string

// Shards returns the shards owned by id, in ascending order.
func (a Assignment) Shards(id string) []int {
	var out []int
	for s, owner := range a {
		if owner == id {
			out = append(out, s)
		}
	}
	return out
}

// Moved counts the shards whose owner differs between a and b.
func (a Assignment) Moved(b Assignment) int {
	n := 0
	for s := range a {
		if a[s] != b[s] {
			n++
		}
	}
	return n
}

// ShardTable is the mesh's shared assignment. Any member that sees the live
// members differ from Members writes worker.Rebalance(Owners, live) by
// compare-and-set on the table's revision, so that concurrent writers agree
// on one successor and every worker follows the same owners.
type ShardTable struct {
	Members []string   `json:"members"` // sorted ids of the members it was computed for
	Owners  Assignment `json:"owners"`
	At      time.Time  `json:"at"`
}

// PoolTable holds one [ShardTable] per task type on a pools deployment:
// the workers that register a type form its ring and split its 32 shards by
// worker.Rebalance, as the workers of a deployment without pools split the
// catch-all shards. A worker serving several types is a member of each of
// their rings. Any member that sees a type's live members differ from its
// table's writes the whole PoolTable by compare-and-set on its revision.
type PoolTable struct {
	Types map[string]ShardTable `json:"types"`
}
