package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A look for the tasks paused aside reads the record of a schedule only
// when the schedule says it was written for a pause (Ax-Aside): with a
// million delayed tasks waiting, each look would otherwise read a million
// records. The record still decides (release checks it).
func TestResumerLooksOnlyAtSchedulesPausedAside(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunFastServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	l, err := New(ctx, js, &Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	names := l.cfg.Names
	schedule := func(id string, mark string) {
		submit := nats.NewMsg(names.SubmitSubject(2, "acme", "report", "k"))
		msg := names.DelayedMsg("acme", id, submit, time.Now().Add(time.Hour))
		if mark != "" {
			msg.Header.Set(streams.HeaderAside, mark)
		}
		_, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	schedule("delayed-1", "")
	schedule("aside-1", streams.AsidePaused)
	schedule("delayed-2", "")
	schedule("other-mark", "limit")
	schedule("aside-2", streams.AsidePaused)

	r := newResumer(l)
	r.paused.Store(&pausedSet{})
	stream, err := js.Stream(ctx, names.DelayedStream())
	require.NoError(t, err)
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{names.DelayedFilter()}, HeadersOnly: true})
	require.NoError(t, err)
	work := make(chan candidate, 10)
	require.NoError(t, r.scan(ctx, cons, work))
	close(work)
	var ids []string
	for c := range work {
		ids = append(ids, c.ref.ID)
	}
	require.Equal(t, []string{"aside-1", "aside-2"}, ids)
}
