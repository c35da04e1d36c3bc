package worker

import "slices"

// The assist part of the intake: what the live peers handle, and the
// shards of the peers that lack a handler this worker has, which it pulls
// beside their owner (see unhandled.go).

// peer is what the mesh loop knows of a live member.
type peer struct {
	types   []string // its pools (pools deployment)
	handles []string // the types it has handlers for; nil: not said (an earlier release)
}

// peerTypes is what the live peers of a worker handle, for the slots.
type peerTypes struct {
	all     bool            // a peer does not say: it may handle any type
	handles map[string]bool // types some live peer handles
}

// peerHandles summarizes what the live members other than self handle.
func (v *meshView) peerHandles(self string) *peerTypes {
	out := &peerTypes{handles: map[string]bool{}}
	for id, p := range v.live {
		if id == self {
			continue
		}
		if p.handles == nil {
			out.all = true
		}
		for _, t := range p.handles {
			out.handles[t] = true
		}
	}
	return out
}

// peerHandles reports whether a live peer may handle taskType (false with
// fixed shards, where the worker knows no peers).
func (in *intake) peerHandles(taskType string) bool {
	p := in.peers.Load()
	return p != nil && (p.all || p.handles[taskType])
}

// assistShards returns the shards owned by live peers that lack a handler
// this worker has: it pulls them beside their owner, so that the tasks the
// owner puts back reach it (default layout only; a pools deployment routes
// each type to its own consumers).
func (in *intake) assistShards(v *meshView) []int {
	mine := in.cfg.Registry.Types()
	lacking := map[string]bool{}
	for id, p := range v.live {
		if id == in.cfg.ID || p.handles == nil {
			continue
		}
		for _, t := range mine {
			if !slices.Contains(p.handles, t) {
				lacking[id] = true
				break
			}
		}
	}
	var out []int
	for shard, owner := range v.table.Owners {
		if lacking[owner] {
			out = append(out, shard)
		}
	}
	return out
}
