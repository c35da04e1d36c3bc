package streams

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Fair shares (issue 26). A deployment provisioned with [LayoutFair]
// routes by tenant: instead of one catch-all consumer per (priority,
// shard), each tenant has its own consumer per (priority, shard), so that
// one tenant's backlog is a queue of its own and does not hold back the
// tasks another tenant submits at the same priority: a worker pulls from
// every tenant's consumer of the shards it serves and takes their
// deliveries in turn. The leader creates a tenant's consumers when it
// first sees the tenant ([EnsureTenantConsumers]); until then the
// tenant's tasks wait in their bucket (WorkQueue retention removes a
// message only when a consumer acks it).

// MaxTenants is how many tenants a fair deployment serves (each costs a
// consumer per priority and shard, and a bucket holds at most
// poolsMaxConsumers); the tasks of a tenant beyond it wait in their bucket.
const MaxTenants = poolsMaxConsumers / (Shards * Priorities)

// TenantFilter returns the filter subject of the consumer of (priority,
// shard, tenant): the tenant's submits and control-plane copies.
func (n Names) TenantFilter(p, shard int, tenant string) string {
	return fmt.Sprintf("%s.p%d.%d.%s.>", n.Prefix(), p, shard, tenant)
}

// TenantConsumerName returns the durable name of the consumer of
// (priority, shard, tenant), e.g. "p0-s07-n-acme". A tenant that is not
// made of letters, digits, '-' and '_' (at most 64) is named by a hash of
// it.
func (n Names) TenantConsumerName(p, shard int, tenant string) string {
	return fmt.Sprintf("%s%02d-n-%s", consumerPrefix(p), shard, typeNameToken(tenant))
}

// TenantConsumerConfig returns the configuration of the durable pull
// consumer of (priority, shard, tenant): that of the shard's catch-all
// consumer ([ConsumerConfig]) with the tenant's filter.
func TenantConsumerConfig(cfg *Config, priority, shard int, tenant string) (jetstream.ConsumerConfig, error) {
	if err := ValidateToken("tenant", tenant); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	cc, err := ConsumerConfig(cfg, priority, shard)
	if err != nil {
		return cc, err
	}
	cc.Durable = cfg.Names.TenantConsumerName(priority, shard, tenant)
	cc.Description = fmt.Sprintf("ax shard %d of P%d, tenant %s", shard, priority, tenant)
	cc.FilterSubject = cfg.Names.TenantFilter(priority, shard, tenant)
	return cc, nil
}

// EnsureTenantConsumers creates the consumers of tenant on every
// (priority, shard) of a fair deployment, as [RoutedConfig] of its buckets
// says, and leaves those that exist. It returns how many it created.
func EnsureTenantConsumers(ctx context.Context, js jetstream.JetStream, cfg *Config, tenant string) (int, error) {
	return ensureRoutedConsumers(ctx, js, cfg, func(p, shard int) (jetstream.ConsumerConfig, error) {
		return TenantConsumerConfig(cfg, p, shard, tenant)
	})
}

// TenantStoredFilter returns the subjects of one tenant's tasks stored in
// priority stream p, on every shard, control-plane copies included:
// "<prefix>.p<N>.*.<tenant>.>".
func (n Names) TenantStoredFilter(p int, tenant string) string {
	return fmt.Sprintf("%s.p%d.*.%s.>", n.Prefix(), p, tenant)
}

// TenantQueue is one tenant's tasks in one priority bucket of a fair
// deployment, summed over the tenant's consumers of the bucket.
type TenantQueue struct {
	Tenant   string `json:"tenant"`
	Priority int    `json:"priority"`
	// Waiting is the tasks not delivered yet (the consumers' pending);
	// InFlight those delivered and not yet acknowledged.
	Waiting  uint64 `json:"waiting"`
	InFlight int    `json:"in_flight"`
}

// TenantQueues reads, from the consumers of priority bucket p of a fair
// deployment, each tenant's queue that holds tasks, and the in-flight
// count of every consumer of the bucket. On another layout it returns no
// queue.
func TenantQueues(ctx context.Context, stream jetstream.Stream, p int) ([]TenantQueue, int, error) {
	fair := LayoutOf(stream.CachedInfo().Config) == LayoutFair
	queues := map[string]*TenantQueue{}
	inFlight := 0
	consumers := stream.ListConsumers(ctx)
	for c := range consumers.Info() {
		inFlight += c.NumAckPending
		if !fair {
			continue
		}
		// A tenant's consumer filters "<prefix>.p<N>.<shard>.<tenant>.>".
		tokens := strings.Split(c.Config.FilterSubject, ".")
		if len(tokens) != 5 || tokens[4] != ">" || (c.NumPending == 0 && c.NumAckPending == 0) {
			continue
		}
		q := queues[tokens[3]]
		if q == nil {
			q = &TenantQueue{Tenant: tokens[3], Priority: p}
			queues[tokens[3]] = q
		}
		q.Waiting += c.NumPending
		q.InFlight += c.NumAckPending
	}
	if err := consumers.Err(); err != nil {
		return nil, 0, fmt.Errorf("list consumers of %s: %w", stream.CachedInfo().Config.Name, err)
	}
	out := make([]TenantQueue, 0, len(queues))
	for _, q := range queues {
		out = append(out, *q)
	}
	return out, inFlight, nil
}
