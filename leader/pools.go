package leader

import (
	"context"
	"fmt"
	"strings"

	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// bucketConsumers returns the names of the consumers that deliver bucket
// prio's tasks: its 32 shard consumers, or on a pools deployment the
// consumers of every task type (p<N>-s<SS>-t-<type>), read from the server.
func bucketConsumers(ctx context.Context, js jetstream.JetStream, names streams.Names, prio int) ([]string, error) {
	name := names.PriorityStream(prio)
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", name, err)
	}
	var out []string
	if !streams.UsesPools(stream.CachedInfo().Config) {
		for shard := range streams.Shards {
			out = append(out, names.ConsumerName(prio, shard))
		}
		return out, nil
	}
	list := stream.ConsumerNames(ctx)
	prefix := fmt.Sprintf("p%d-s", prio)
	for consumer := range list.Name() {
		if strings.HasPrefix(consumer, prefix) {
			out = append(out, consumer)
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", name, err)
	}
	return out, nil
}
