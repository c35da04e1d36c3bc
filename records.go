package ax

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

// The task record and the names of a deployment belong to ax's storage
// layer (internal/kv, internal/streams), which is not API; these are the
// names a user writes for the values the API hands out (the record of
// [Client.Get], the management API's replies, a Config's Names).
type (
	// Record is the durable state of one task, as [Client.Get], the
	// management API's task.get and the dashboard show it: its state, its
	// binding to the message that runs it, its result and its trail.
	// docs/WIRE.md ("Records") is its JSON form.
	Record = kv.Record
	// Move is one state change of a task: an event of [Record.Trail].
	Move = kv.Move
	// Progress is a handler's last report of how far a task has come.
	Progress = kv.Progress
	// Ref names a task: its tenant and id.
	Ref = kv.Ref
	// Store reads and moves task records by compare-and-set ([Client.Store]).
	Store = kv.Store
	// StoreConfig tunes a [Store]: [Config.Store] of every role.
	StoreConfig = kv.StoreConfig
	// Names derives every subject, stream, consumer and bucket name of one
	// deployment from its prefix; the zero value is the default
	// deployment's ([DefaultNames]).
	Names = streams.Names
)

// NewNames returns the names of the deployment of prefix, which it
// validates (a subject token; its upper-case form names the streams and
// buckets).
func NewNames(prefix string) (Names, error) { return streams.NewNames(prefix) }

// DefaultNames returns the names of the default deployment (prefix "ax",
// streams and buckets AX_…).
func DefaultNames() Names { return streams.DefaultNames() }

var (
	// ErrNotFound means no record exists for the task (tenant and id).
	ErrNotFound = kv.ErrNotFound
	// ErrConflict means another writer changed the record since it was
	// read (the compare-and-set on the revision failed).
	ErrConflict = kv.ErrConflict
)

// MaxErrorLen is how many bytes of an error a record, a trail move or a
// dead letter keeps.
const MaxErrorLen = kv.MaxErrorLen

// Get returns the record of task id of tenant (empty: [DefaultTenant]): its
// state, attempts, result and trail. A task without a record (unknown, or
// expired past the record's retention) gives an error matching
// [ErrNotFound]. It reads the record once, as [Client.Result] does; a
// task submitted without an id or key of its own that no worker has claimed
// yet has no record (its claim writes it: docs/decisions/record-at-claim.md),
// and Get returns the READY record that claim starts from, read from its
// bucket (revision 0). A publish-only client gets [ErrPublishOnly].
func (c *Client) Get(ctx context.Context, tenant, id string) (*Record, error) {
	r := ref(tenant, id)
	if c.cfg.PublishOnly {
		return nil, fmt.Errorf("get task %s: %w", r, ErrPublishOnly)
	}
	rec, err := c.read(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("get task %s: %w", r, err)
	}
	return rec, nil
}

// read returns the record of task r, or for a task waiting unclaimed in
// its bucket without one, the READY record its claim starts from.
func (c *Client) read(ctx context.Context, r kv.Ref) (*Record, error) {
	rec, _, _, err := c.store.Read(ctx, r)
	if err != nil {
		return nil, err
	}
	return rec, nil
}
