package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A pools deployment has no catch-all consumer; each type's consumers are
// created on demand with the provisioned settings, once; the two layouts
// cannot be switched by provisioning, and the server itself refuses a
// catch-all consumer beside a type's (overlapping WorkQueue filters).
func TestPoolsProvisioning(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	cfg := &streams.Config{Layout: streams.LayoutPools, AckWait: 7 * time.Second, Types: []string{"email"}}
	report, err := streams.Provision(ctx, js, cfg)
	require.NoError(t, err)
	require.Len(t, report.Created, streams.Priorities+4+1, "streams and one line for the email consumers: %v", report.Created)
	_, err = js.Consumer(ctx, "AX_P0", "p0-s00")
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "no catch-all consumer")

	again, err := streams.Provision(ctx, js, cfg)
	require.NoError(t, err)
	require.Empty(t, again.Created)
	require.Empty(t, again.Updated, "a second run must change nothing")

	stream, err := js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	sc := stream.CachedInfo().Config
	require.Equal(t, streams.LayoutPools, streams.LayoutOf(sc))
	back, err := streams.RoutedConfig(streams.Names{}, sc)
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, back.AckWait)
	require.Equal(t, streams.DefaultPriorityPolicy, back.PriorityPolicy)

	created, err := streams.EnsureTypeConsumers(ctx, js, back, "resize")
	require.NoError(t, err)
	require.Equal(t, streams.Priorities*streams.Shards, created)
	created, err = streams.EnsureTypeConsumers(ctx, js, back, "resize")
	require.NoError(t, err)
	require.Zero(t, created, "existing consumers are left as they are")
	cons, err := js.Consumer(ctx, "AX_P2", "p2-s05-t-resize")
	require.NoError(t, err)
	cc := cons.CachedInfo().Config
	require.Equal(t, "ax.p2.5.*.resize.>", cc.FilterSubject)
	require.Equal(t, 7*time.Second, cc.AckWait)
	require.Equal(t, jetstream.PriorityPolicyOverflow, cc.PriorityPolicy)

	// nats-server consumer.go: a WorkQueue stream refuses a consumer whose
	// filter overlaps another's (error 10100).
	catchAll, err := streams.ConsumerConfig(back, 2, 5)
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "AX_P2", catchAll)
	require.ErrorContains(t, err, "filtered consumer not unique on workqueue stream")

	_, err = streams.Provision(ctx, js, &streams.Config{})
	require.ErrorIs(t, err, streams.ErrLayoutChange, "a pools deployment stays one")
	_, js2 := natstest.RunServer(t)
	_, err = streams.Provision(ctx, js2, &streams.Config{})
	require.NoError(t, err)
	_, err = streams.Provision(ctx, js2, &streams.Config{Layout: streams.LayoutPools})
	require.ErrorIs(t, err, streams.ErrLayoutChange, "a shared deployment stays one")
}

// Type names that are not plain consumer-name material are hashed.
func TestTypeConsumerName(t *testing.T) {
	t.Parallel()
	n := streams.Names{}
	require.Equal(t, "p1-s03-t-email_v2", n.TypeConsumerName(1, 3, "email_v2"))
	odd := n.TypeConsumerName(1, 3, "mail/out:x")
	require.Regexp(t, `^p1-s03-t-h[0-9a-f]{24}$`, odd)
	require.NotEqual(t, odd, n.TypeConsumerName(1, 3, "mail/out:y"))
}

// Why ax never changes a type's consumer (nats-server consumer.go
// updateConfig): a consumer whose filters gain a subject does not go back
// for the messages of that subject stored before its delivered sequence.
// On a WorkQueue stream those would wait forever; so a type keeps its own
// consumers, and moving it between pools changes no filter.
func TestAddedFilterDoesNotRewind(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "wq.b", []byte("b1"))
	require.NoError(t, err)
	_, err = js.Publish(ctx, "wq.a", []byte("a1"))
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, "WQ", jetstream.ConsumerConfig{Durable: "pool", FilterSubjects: []string{"wq.a"}, AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	require.NoError(t, err)
	for msg := range batch.Messages() {
		require.Equal(t, "a1", string(msg.Data()))
		require.NoError(t, msg.DoubleAck(ctx))
	}
	cons, err = js.UpdateConsumer(ctx, "WQ", jetstream.ConsumerConfig{Durable: "pool", FilterSubjects: []string{"wq.a", "wq.b"}, AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err = cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	require.NoError(t, err)
	var got []string
	for msg := range batch.Messages() {
		got = append(got, string(msg.Data()))
	}
	require.Empty(t, got, "the consumer does not rewind to b1")
	stream, err := js.Stream(ctx, "WQ")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs, "b1 stays in the stream")
}

// Provisioning a pools deployment refuses, naming them, catch-all shard
// consumers of the shared layout added to its buckets: they overlap every
// type's consumer, so no worker of a type could
// start, and the deployment must not be reported unchanged.
func TestPoolsProvisionRefusesShardConsumers(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	cfg := &streams.Config{Layout: streams.LayoutPools}
	_, err := streams.Provision(ctx, js, cfg)
	require.NoError(t, err)
	// What a provision of the shard layout adds: p<N>-s<SS> filtering ax.p<N>.<SS>.>.
	cc, err := streams.ConsumerConfig(&streams.Config{}, 3, 7)
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "AX_P3", cc)
	require.NoError(t, err)

	_, err = streams.Provision(ctx, js, cfg)
	require.ErrorIs(t, err, streams.ErrLayoutChange)
	require.ErrorContains(t, err, "nats consumer rm AX_P3 p3-s07")

	require.NoError(t, js.DeleteConsumer(ctx, "AX_P3", "p3-s07"))
	_, err = streams.Provision(ctx, js, cfg)
	require.NoError(t, err, "provisioned again once they are removed")
}
