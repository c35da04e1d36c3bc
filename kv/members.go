package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/streams"
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
	Pools     map[string][]int `json:"pools,omitempty"`
	InFlight  int              `json:"in_flight"` // tasks running when it last renewed
	StartedAt time.Time        `json:"started_at"`
	// RenewedAt is when the membership lease was last renewed.
	RenewedAt time.Time `json:"renewed_at"`
}

// ListMembers returns the live members of the deployment, sorted by id.
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
		if err := json.Unmarshal(entry.Value(), &lease); err != nil || json.Unmarshal(lease.Data, &m) != nil {
			return nil, fmt.Errorf("list members: %s holds no member record", key)
		}
		m.RenewedAt = lease.RenewedAt
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
