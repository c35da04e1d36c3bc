package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Tenants is what AX_CONTROL holds under [TenantsKey] on a fair deployment
// (streams.LayoutFair): the tenants whose consumers exist, sorted. The
// leader adds a tenant once it has created its consumers; every worker
// watches the key and pulls from the consumers of each tenant listed.
type Tenants struct {
	Tenants []string `json:"tenants"`
}

// DecodeTenants decodes the value of [TenantsKey]. A value that is not
// the list ax writes (another field, or no list: a publish acknowledgement
// would otherwise read as an empty list) is [ErrForeignValue]; the leader
// writes the list again from the consumers that exist.
func DecodeTenants(data []byte) (Tenants, error) {
	var t struct {
		Tenants *[]string `json:"tenants"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Tenants{}, fmt.Errorf("decode %s: %w: %w", TenantsKey, ErrForeignValue, err)
	}
	if t.Tenants == nil {
		return Tenants{}, fmt.Errorf("decode %s: %w: no list", TenantsKey, ErrForeignValue)
	}
	return Tenants{Tenants: *t.Tenants}, nil
}

// ReadTenants reads the tenants of a fair deployment and the key's
// revision (0: none listed yet); with [ErrForeignValue] it returns the
// revision of the value found, which a write may replace.
func ReadTenants(ctx context.Context, board jetstream.KeyValue) (Tenants, uint64, error) {
	entry, err := board.Get(ctx, TenantsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Tenants{}, 0, nil
	}
	if err != nil {
		return Tenants{}, 0, fmt.Errorf("read %s: %w", TenantsKey, err)
	}
	t, err := DecodeTenants(entry.Value())
	return t, entry.Revision(), err
}

// AddTenants adds tenants to the list under [TenantsKey] by compare-and-set,
// retrying on a concurrent write; it leaves the list as it is when it holds
// them already. A value ax did not write ([ErrForeignValue]) is replaced by
// tenants alone: the caller names every tenant it knows.
func AddTenants(ctx context.Context, board jetstream.KeyValue, tenants ...string) error {
	for range 32 {
		have, rev, err := ReadTenants(ctx, board)
		if err != nil && !errors.Is(err, ErrForeignValue) {
			return err
		}
		if err != nil {
			have = Tenants{} // replaced: the caller names every tenant it knows
		}
		next := slices.Clone(have.Tenants)
		for _, t := range tenants {
			if !slices.Contains(next, t) {
				next = append(next, t)
			}
		}
		if len(next) == len(have.Tenants) {
			return nil
		}
		slices.Sort(next)
		data, err := json.Marshal(Tenants{Tenants: next})
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = board.Create(ctx, TenantsKey, data)
		} else {
			_, err = board.Update(ctx, TenantsKey, data, rev)
		}
		if err == nil {
			return nil
		}
		if !streams.IsRevisionMismatch(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("write %s: %w", TenantsKey, err)
		}
	}
	return fmt.Errorf("write %s: too many concurrent writes", TenantsKey)
}

// ListTenants adds tenants to [TenantsKey] of the deployment named names,
// as provisioning a fair deployment does once it made their consumers
// (streams.Config.Tenants), so that workers serve them before the leader
// finds them. Without tenants it does nothing.
func ListTenants(ctx context.Context, js jetstream.JetStream, names streams.Names, tenants ...string) error {
	if len(tenants) == 0 {
		return nil
	}
	board, err := Open(ctx, js, names)
	if err != nil {
		return err
	}
	return AddTenants(ctx, board, tenants...)
}
