package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// deploymentPools reads the first priority bucket's configuration, retrying
// like [intake.bindConsumer]: on a pools deployment it returns the type
// consumers' settings ([streams.RoutedConfig]), otherwise nil. It keeps the
// buckets' MaxMsgSize, which bounds a delayed task ([runner.delayedLimit]).
func (in *intake) deploymentPools(ctx context.Context) (*streams.Config, error) {
	name := in.cfg.Names.PriorityStream(0)
	wait := 100 * time.Millisecond
	for {
		stream, err := in.js.Stream(ctx, name)
		if err == nil {
			sc := stream.CachedInfo().Config
			in.maxMsgSize = sc.MaxMsgSize
			if !streams.LayoutOf(sc).Routed() {
				return nil, nil
			}
			return streams.RoutedConfig(in.cfg.Names, sc)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("look up stream %s: %w", name, err)
		}
		in.log.Warn("bind_stream_retry", zap.String("stream", name), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("look up stream %s: %w", name, err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// bindConsumer looks up the consumer of (priority, shard) of set s,
// retrying with backoff while the server cannot answer (a cluster electing
// leaders, a node restarting), until ctx ends.
func (in *intake) bindConsumer(ctx context.Context, s *shardSet, priority, shard int) (jetstream.Consumer, error) {
	stream, name := in.cfg.Names.PriorityStream(priority), in.consumerName(s, priority, shard)
	wait := 100 * time.Millisecond
	for {
		cons, err := in.js.Consumer(ctx, stream, name)
		if err == nil {
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bind consumer %s/%s: %w", stream, name, err)
		}
		in.log.Warn("bind_consumer_retry", zap.String("stream", stream), zap.String("consumer", name), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bind consumer %s/%s: %w", stream, name, err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}
