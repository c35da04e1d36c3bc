package streams

import (
	"cmp"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Layout is how a deployment's priority buckets hand tasks to workers: the
// consumers [Provision] makes on them. A deployment keeps the layout it was
// created with ([ErrLayoutChange]); the priority buckets record it in
// their metadata ([MetaRouting]), where every process reads it
// ([LayoutOf]).
type Layout string

const (
	// LayoutShared is the default: one catch-all consumer per priority and
	// shard, which every worker may pull from whatever the task's type or
	// tenant. The zero Layout means it.
	LayoutShared Layout = "shared"
	// LayoutPools routes by task type (worker pools): no catch-all
	// consumer; each task type gets its own consumer per priority and
	// shard when a worker that registers it starts
	// ([EnsureTypeConsumers]) or from [Config.Types]. Its buckets'
	// [MetaRouting] is [RoutingTypes].
	LayoutPools Layout = "pools"
	// LayoutFair gives tenants fair shares (routing by tenant): no
	// catch-all consumer; each tenant gets its own consumer per priority
	// and shard when the leader first sees it ([EnsureTenantConsumers]) or
	// from [Config.Tenants], and a worker serves the tenants in turn. Its
	// buckets' [MetaRouting] is [RoutingTenants].
	LayoutFair Layout = "fair"
)

// Layouts lists the layouts, the default first.
func Layouts() []Layout { return []Layout{LayoutShared, LayoutPools, LayoutFair} }

// String returns the layout's name, "shared" for the zero Layout.
func (l Layout) String() string {
	if l == "" {
		return string(LayoutShared)
	}
	return string(l)
}

// ParseLayout reads a layout's name ("shared", "pools" or "fair"); the
// empty string is [LayoutShared]. Any other name is an error that lists
// the valid ones.
func ParseLayout(name string) (Layout, error) {
	l := Layout(name)
	if err := l.validate(); err != nil {
		return "", err
	}
	return cmp.Or(l, LayoutShared), nil
}

// Routed reports whether the layout has no catch-all shard consumers:
// its consumers are made per task type or per tenant.
func (l Layout) Routed() bool { return l == LayoutPools || l == LayoutFair }

func (l Layout) validate() error {
	switch l {
	case "", LayoutShared, LayoutPools, LayoutFair:
		return nil
	}
	return fmt.Errorf("layout %q is not one of %v", string(l), Layouts())
}

// LayoutOf returns the layout a priority bucket's configuration records
// ([MetaRouting]): [LayoutShared] when it records none.
func LayoutOf(sc jetstream.StreamConfig) Layout {
	switch sc.Metadata[MetaRouting] {
	case RoutingTypes:
		return LayoutPools
	case RoutingTenants:
		return LayoutFair
	}
	return LayoutShared
}

// routingValue is the [MetaRouting] value a routed layout's buckets carry.
func (l Layout) routingValue() string {
	if l == LayoutFair {
		return RoutingTenants
	}
	return RoutingTypes
}
