package streams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Worker pools (issue 15). A deployment provisioned with [LayoutPools]
// routes by task type: instead of one catch-all consumer per (priority,
// shard), each task type has its own consumer per (priority, shard),
// created when a worker that registers the type starts
// ([EnsureTypeConsumers]). A WorkQueue stream refuses consumers whose
// filters overlap (nats-server consumer.go, partitionUnique), so the two
// layouts cannot coexist on one stream. A message whose type has no
// consumer stays in its bucket (WorkQueue retention removes a message
// only when a consumer acks it) until one is created.

// Stream metadata keys of a priority bucket provisioned for pools. The
// type consumers' settings are kept there so that a worker creates them as
// provisioning would.
const (
	MetaRouting        = "ax_routing"          // RoutingTypes on a pools deployment, RoutingTenants on a fair one
	metaAckWait        = "ax_ack_wait"         // Go duration
	metaMaxAckPending  = "ax_max_ack_pending"  // integer
	metaPriorityPolicy = "ax_priority_policy"  // none, overflow, pinned_client
	metaPinnedTTL      = "ax_pinned_ttl"       // Go duration
	RoutingTypes       = "types"               // value of MetaRouting: worker pools
	RoutingTenants     = "tenants"             // value of MetaRouting: fair shares between tenants
	poolsMaxConsumers  = 32 * Priorities * 320 // room for 320 types per bucket
)

// TypeFilter returns the filter subject of the consumer of (priority,
// shard, task type): its submits and its control-plane copies.
func (n Names) TypeFilter(p, shard int, taskType string) string {
	return fmt.Sprintf("%s.p%d.%d.*.%s.>", n.Prefix(), p, shard, taskType)
}

// StoredTypeFilter returns the subjects of one task type's tasks stored in
// priority stream p, on every shard and of every tenant, control-plane
// copies included: "<prefix>.p<N>.*.*.<type>.>".
func (n Names) StoredTypeFilter(p int, taskType string) string {
	return fmt.Sprintf("%s.p%d.*.*.%s.>", n.Prefix(), p, taskType)
}

// TypeConsumerName returns the durable name of the consumer of (priority,
// shard, task type), e.g. "p0-s07-t-email". A type that is not made of
// letters, digits, '-' and '_' (at most 64) is named by a hash of it.
func (n Names) TypeConsumerName(p, shard int, taskType string) string {
	return fmt.Sprintf("%s%02d-t-%s", consumerPrefix(p), shard, typeNameToken(taskType))
}

// BucketConsumers returns the names of the consumers that deliver priority
// bucket p's tasks: its [Shards] shard consumers ([Names.ConsumerName]), or
// on a pools or fair deployment the consumers of every task type
// ([Names.TypeConsumerName]) or tenant ([Names.TenantConsumerName]), listed
// from the server.
func BucketConsumers(ctx context.Context, js jetstream.JetStream, n Names, p int) ([]string, error) {
	name := n.PriorityStream(p)
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", name, err)
	}
	var out []string
	if !LayoutOf(stream.CachedInfo().Config).Routed() {
		for shard := range Shards {
			out = append(out, n.ConsumerName(p, shard))
		}
		return out, nil
	}
	list := stream.ConsumerNames(ctx)
	for consumer := range list.Name() {
		if strings.HasPrefix(consumer, consumerPrefix(p)) {
			out = append(out, consumer)
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", name, err)
	}
	return out, nil
}

var plainType = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func typeNameToken(taskType string) string {
	if plainType.MatchString(taskType) {
		return taskType
	}
	sum := sha256.Sum256([]byte(taskType))
	return "h" + hex.EncodeToString(sum[:12])
}

func routedMetadata(cfg *Config) map[string]string {
	return map[string]string{
		MetaRouting:        cfg.Layout.routingValue(),
		metaAckWait:        cfg.AckWait.String(),
		metaMaxAckPending:  strconv.Itoa(cfg.MaxAckPending),
		metaPriorityPolicy: cfg.PriorityPolicy,
		metaPinnedTTL:      cfg.PinnedTTL.String(),
	}
}

// RoutedConfig reads back the consumer settings a pools or fair deployment
// was provisioned with from a priority bucket's configuration.
func RoutedConfig(n Names, sc jetstream.StreamConfig) (*Config, error) {
	if !LayoutOf(sc).Routed() {
		return nil, fmt.Errorf("stream %s is not provisioned for pools or fair shares", sc.Name)
	}
	md := sc.Metadata
	ackWait, err1 := time.ParseDuration(md[metaAckWait])
	pinned, err2 := time.ParseDuration(md[metaPinnedTTL])
	pending, err3 := strconv.Atoi(md[metaMaxAckPending])
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("stream %s: routing metadata: %w", sc.Name, err)
	}
	cfg := (&Config{Names: n, Replicas: sc.Replicas, AckWait: ackWait, MaxAckPending: pending,
		PriorityPolicy: md[metaPriorityPolicy], PinnedTTL: pinned, Layout: LayoutOf(sc)}).withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// TypeConsumerConfig returns the configuration of the durable pull consumer
// of (priority, shard, task type): that of the shard's catch-all consumer
// ([ConsumerConfig]) with the type's filter.
func TypeConsumerConfig(cfg *Config, priority, shard int, taskType string) (jetstream.ConsumerConfig, error) {
	if err := ValidateToken("task type", taskType); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	cc, err := ConsumerConfig(cfg, priority, shard)
	if err != nil {
		return cc, err
	}
	cc.Durable = cfg.Names.TypeConsumerName(priority, shard, taskType)
	cc.Description = fmt.Sprintf("ax shard %d of P%d, type %s", shard, priority, taskType)
	cc.FilterSubject = cfg.Names.TypeFilter(priority, shard, taskType)
	return cc, nil
}

// EnsureTypeConsumers creates the consumers of taskType on every (priority,
// shard) of a pools deployment, as [RoutedConfig] of its buckets says, and
// leaves those that exist (a type's consumers are the same whichever
// workers serve it, so moving a type between pools changes no consumer).
// It returns how many it created.
func EnsureTypeConsumers(ctx context.Context, js jetstream.JetStream, cfg *Config, taskType string) (int, error) {
	return ensureRoutedConsumers(ctx, js, cfg, func(p, shard int) (jetstream.ConsumerConfig, error) {
		return TypeConsumerConfig(cfg, p, shard, taskType)
	})
}

// ensureRoutedConsumers creates the consumer configFor gives on every
// (priority, shard) where it does not exist yet, paused as long as the
// bucket's other consumers ([bucketPause]). It returns how many it created.
func ensureRoutedConsumers(ctx context.Context, js jetstream.JetStream, cfg *Config, configFor func(p, shard int) (jetstream.ConsumerConfig, error)) (int, error) {
	created := 0
	for p := range Priorities {
		stream := cfg.Names.PriorityStream(p)
		var pause *time.Time
		pauseRead := false
		for shard := range Shards {
			cc, err := configFor(p, shard)
			if err != nil {
				return created, err
			}
			_, err = js.Consumer(ctx, stream, cc.Durable)
			if err == nil {
				continue
			}
			if !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return created, fmt.Errorf("look up consumer %s/%s: %w", stream, cc.Durable, err)
			}
			if !pauseRead {
				if pause, err = bucketPause(ctx, js, stream); err != nil {
					return created, err
				}
				pauseRead = true
			}
			cc.PauseUntil = pause
			if _, err := js.CreateConsumer(ctx, stream, cc); err != nil {
				return created, fmt.Errorf("create consumer %s/%s: %w", stream, cc.Durable, err)
			}
			created++
		}
	}
	return created, nil
}

// bucketPause returns until when the consumers of stream are paused, the
// latest of their pauses, or nil: backpressure pauses every consumer of a
// bucket, so a type's consumers created meanwhile start paused as long as
// the others instead of delivering until the leader's next pause.
func bucketPause(ctx context.Context, js jetstream.JetStream, stream string) (*time.Time, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", stream, err)
	}
	var until *time.Time
	lister := s.ListConsumers(ctx)
	for info := range lister.Info() {
		if pu := info.Config.PauseUntil; info.Paused && pu != nil && (until == nil || pu.After(*until)) {
			u := *pu
			until = &u
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", stream, err)
	}
	return until, nil
}
