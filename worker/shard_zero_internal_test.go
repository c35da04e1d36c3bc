package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// shardZeroWorker starts a server, provisions it (ack wait 3 s, no
// priority policy) and makes a worker of shard 0, not started.
func shardZeroWorker(t *testing.T) (*Worker, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, &streams.Config{AckWait: 3 * time.Second, PriorityPolicy: "none"})
	w, err := New(context.Background(), js, &Config{Registry: NewRegistry(), Shards: []int{0}, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	return w, js
}

// fetchShardZero publishes a task of acme's taskType with data at P2, on a
// key of shard 0, and fetches it from its shard consumer: a real delivery,
// left unacked. It returns the message and the key.
func fetchShardZero(t *testing.T, js jetstream.JetStream, taskType string, data []byte) (jetstream.Msg, string) {
	t.Helper()
	ctx := context.Background()
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); streams.Shard(k) == 0 {
			key = k
		}
	}
	names := streams.DefaultNames()
	_, err := js.Publish(ctx, names.SubmitSubject(2, "acme", taskType, key), data)
	require.NoError(t, err)
	cons, err := js.Consumer(ctx, names.PriorityStream(2), names.ConsumerName(2, 0))
	require.NoError(t, err)
	batch, err := cons.Fetch(1)
	require.NoError(t, err)
	msg := <-batch.Messages()
	require.NotNil(t, msg)
	return msg, key
}
