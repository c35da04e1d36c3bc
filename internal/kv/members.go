package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Member is what a worker announces in the AX_WORKERS bucket: the data of
// its membership lease (key: the worker id, with a per-key TTL).
type Member struct {
	ID          string `json:"id"`
	Host        string `json:"host"`
	Concurrency int    `json:"concurrency"`
	Version     string `json:"version"`
	Shards      []int  `json:"shards"` // shards the worker owns
	// Types the worker serves on a pools deployment (its pool); empty on
	// a deployment whose workers share every shard.
	Types []string `json:"types,omitempty"`
	// Pools maps each type of Types to the shards the worker owns in that
	// type's ring.
	Pools map[string][]int `json:"pools,omitempty"`
	// Handles lists the task types the worker has a handler for, on every
	// layout (sorted). A worker of a release before it announces none:
	// what it handles is unknown, and it is taken to handle every type.
	Handles []string `json:"handles,omitempty"`
	// Unhandled lists the task types the worker put back lately (within a
	// minute) because it has no handler for them, at most 100: on a
	// deployment without pools, where every worker receives every type,
	// the types that may wait for a worker that has one ([UnservedTypes]).
	Unhandled []string  `json:"unhandled,omitempty"`
	InFlight  int       `json:"in_flight"` // tasks running when it last renewed
	StartedAt time.Time `json:"started_at"`
	// RenewedAt is when the membership lease was last renewed.
	RenewedAt time.Time `json:"renewed_at"`
}

// ListMembers returns the live members of the deployment, sorted by id. A
// key that holds no membership lease of its own worker is no member.
func ListMembers(ctx context.Context, js jetstream.JetStream, names streams.Names) ([]Member, error) {
	bucket, err := js.KeyValue(ctx, names.WorkersBucket())
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	keys, err := ListKeys(ctx, js, names.WorkersBucket(), "")
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	var out []Member
	for _, key := range keys {
		entry, err := bucket.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or left
		}
		if err != nil {
			return nil, fmt.Errorf("list members: get %s: %w", key, err)
		}
		var lease LeaseRecord
		var m Member
		if err := json.Unmarshal(entry.Value(), &lease); err != nil || lease.Holder != key || json.Unmarshal(lease.Data, &m) != nil {
			// Not a membership (a value ax did not write there: a
			// publish acknowledgement sent to a reply subject naming the
			// key, docs/SECURITY.md): no member.
			continue
		}
		m.RenewedAt = lease.RenewedAt
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ServedTypes returns the task types the live members serve: on a
// [streams.LayoutPools] deployment the types of their pools ([Member.Types]), else the types
// they have handlers for ([Member.Handles]). all is true when, on a
// deployment without pools, a member does not say what it handles (a
// worker of an earlier release): every type then counts as served.
func ServedTypes(members []Member, layout streams.Layout) (served map[string]bool, all bool) {
	served = map[string]bool{}
	for _, m := range members {
		types := m.Handles
		if layout == streams.LayoutPools {
			types = m.Types
		} else if len(types) == 0 {
			all = true
		}
		for _, t := range types {
			served[t] = true
		}
	}
	return served, all
}
