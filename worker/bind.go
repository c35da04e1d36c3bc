package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// bindConsumer looks up the consumer of (priority, shard), retrying with
// backoff while the server cannot answer (a cluster electing leaders, a
// node restarting), until ctx ends.
func (w *Worker) bindConsumer(ctx context.Context, priority, shard int) (jetstream.Consumer, error) {
	stream, name := w.cfg.Names.PriorityStream(priority), w.cfg.Names.ConsumerName(priority, shard)
	wait := 100 * time.Millisecond
	for {
		cons, err := w.js.Consumer(ctx, stream, name)
		if err == nil {
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bind consumer %s/%s: %w", stream, name, err)
		}
		w.log.Warn("bind_consumer_retry", zap.String("stream", stream), zap.String("consumer", name), zap.Error(err))
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
