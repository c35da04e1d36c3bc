package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server's handling of a durable pull consumer whose state is kept in
// memory (ConsumerConfig.MemoryStorage) on a file-stored WorkQueue stream,
// as ax's shard consumers would be (issue 37, docs/BENCHMARKS.md "Issue 37:
// memory-stored consumers priced"). Each case delivers m1 and m2 of three
// messages, acks m1 and leaves m2 unacked, then restarts the server(s).

const memTestStream, memTestConsumer = "MEMTEST", "c"

// memTestSetup creates the stream and the consumer and leaves m1 acked and
// m2 delivered once, unacked.
func memTestSetup(t *testing.T, js jetstream.JetStream, replicas int, memory bool) {
	t.Helper()
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: memTestStream, Subjects: []string{"memtest.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, memTestStream, jetstream.ConsumerConfig{Durable: memTestConsumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: -1,
		Replicas: replicas, MemoryStorage: memory})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		_, err := js.Publish(ctx, fmt.Sprintf("memtest.m%d", i), nil)
		require.NoError(t, err)
	}
	msgs := memTestFetch(t, js, 2)
	require.Equal(t, []string{"memtest.m1 #1", "memtest.m2 #1"}, msgs.seen)
	require.NoError(t, msgs.raw[0].DoubleAck(ctx))
	requireStreamHolds(t, js, 2, 3)
}

type fetched struct {
	raw  []jetstream.Msg
	seen []string // "subject #NumDelivered"
}

// memTestFetch fetches n messages of the consumer, waiting for them
// (a redelivery comes after the consumer's 2 s ack wait).
func memTestFetch(t *testing.T, js jetstream.JetStream, n int) fetched {
	t.Helper()
	var out fetched
	require.Eventually(t, func() bool {
		cons, err := js.Consumer(context.Background(), memTestStream, memTestConsumer)
		if err != nil {
			return false
		}
		batch, err := cons.Fetch(n-len(out.raw), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		for msg := range batch.Messages() {
			meta, err := msg.Metadata()
			require.NoError(t, err)
			out.raw = append(out.raw, msg)
			out.seen = append(out.seen, fmt.Sprintf("%s #%d", msg.Subject(), meta.NumDelivered))
		}
		return len(out.raw) >= n
	}, 30*time.Second, 100*time.Millisecond)
	return out
}

// requireStreamHolds waits until the stream holds exactly the sequences
// first..last.
func requireStreamHolds(t *testing.T, js jetstream.JetStream, first, last uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := js.Stream(context.Background(), memTestStream)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.FirstSeq == first && info.State.LastSeq == last && info.State.Msgs == last-first+1
	}, 30*time.Second, 100*time.Millisecond)
}

// consumerState reads the consumer's info, waiting for an answer.
func consumerState(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	var info *jetstream.ConsumerInfo
	require.Eventually(t, func() bool {
		cons, err := js.Consumer(context.Background(), memTestStream, memTestConsumer)
		if err != nil {
			return false
		}
		info, err = cons.Info(context.Background())
		return err == nil && (info.Cluster == nil || info.Cluster.Leader != "")
	}, 60*time.Second, 100*time.Millisecond)
	return info
}

// A single server forgets a memory-stored consumer entirely when it
// restarts: the stream keeps its messages (m1, acked, is gone), the
// consumer must be created again, and it then delivers m2 as a first
// delivery. A file-stored consumer is recovered with its state, and m2
// comes back as its second delivery.
func TestMemoryConsumerSingleServerRestart(t *testing.T) {
	t.Parallel()
	for _, memory := range []bool{false, true} {
		t.Run(fmt.Sprintf("memory=%t", memory), func(t *testing.T) {
			t.Parallel()
			port, data := freePort(t), t.TempDir()
			args := []string{"server", "--name", "s1", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data", data}
			srv := startAx(t, args...)
			url := fmt.Sprintf("nats://127.0.0.1:%d", port)
			_, js := connect(t, url)
			require.Eventually(t, func() bool { _, err := js.AccountInfo(context.Background()); return err == nil }, 30*time.Second, 100*time.Millisecond)
			memTestSetup(t, js, 1, memory)

			srv.kill(t)
			startAx(t, args...)
			requireStreamHolds(t, js, 2, 3)
			ctx := context.Background()
			if !memory {
				info := consumerState(t, js)
				require.Equal(t, uint64(2), info.Delivered.Stream)
				require.Equal(t, uint64(1), info.AckFloor.Stream)
				require.ElementsMatch(t, []string{"memtest.m2 #2", "memtest.m3 #1"}, memTestFetch(t, js, 2).seen)
				return
			}
			_, err := js.Consumer(ctx, memTestStream, memTestConsumer)
			require.True(t, errors.Is(err, jetstream.ErrConsumerNotFound), "consumer after the restart: %v", err)
			_, err = js.CreateConsumer(ctx, memTestStream, jetstream.ConsumerConfig{Durable: memTestConsumer,
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: -1, MemoryStorage: true})
			require.NoError(t, err)
			info := consumerState(t, js)
			require.Equal(t, uint64(1), info.Delivered.Stream, "starts at the stream's first message")
			require.Zero(t, info.NumAckPending)
			require.Equal(t, uint64(2), info.NumPending)
			require.Equal(t, []string{"memtest.m2 #1", "memtest.m3 #1"}, memTestFetch(t, js, 2).seen)
		})
	}
}

// In a 3-node cluster an R3 memory-stored consumer keeps its config in
// the meta layer and its state in the memory of its replicas: a leader
// change keeps the state (m2 comes back as its second delivery), so does
// a restart of one node (the others hold it); a restart of every node at
// once loses it (the consumer is still there,
// with no delivered or ack floor, and m2 comes back as a first delivery).
func TestMemoryConsumerClusterRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, ClusterOptions{})
	js := c.js
	memTestSetup(t, js, 3, true)

	before := consumerState(t, js)
	require.True(t, before.Config.MemoryStorage)
	_, err := js.Conn().Request(fmt.Sprintf("$JS.API.CONSUMER.LEADER.STEPDOWN.%s.%s", memTestStream, memTestConsumer), nil, 5*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info := consumerState(t, js)
		return info.Cluster.Leader != before.Cluster.Leader
	}, 30*time.Second, 100*time.Millisecond)
	after := consumerState(t, js)
	require.Equal(t, uint64(2), after.Delivered.Stream, "delivered floor after a leader change")
	require.Equal(t, uint64(1), after.AckFloor.Stream, "ack floor after a leader change")
	got := memTestFetch(t, js, 2).seen
	require.ElementsMatch(t, []string{"memtest.m2 #2", "memtest.m3 #1"}, got, "after a leader change")

	// m2 and m3 are now delivered (m2 twice), none acked. Restart the
	// consumer's leader alone: the other replicas keep the state.
	leader := c.node(consumerState(t, js).Cluster.Leader)
	c.nodes[leader].kill(t)
	c.restart(leader)
	require.Eventually(t, func() bool {
		info := consumerState(t, js)
		return info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2 && info.Cluster.Replicas[0].Current && info.Cluster.Replicas[1].Current
	}, time.Minute, 200*time.Millisecond, "the restarted node caught up")
	kept := consumerState(t, js)
	require.Equal(t, uint64(3), kept.Delivered.Stream, "delivered floor after a node restart")
	require.Equal(t, uint64(1), kept.AckFloor.Stream, "ack floor after a node restart")
	require.Equal(t, 2, kept.NumAckPending)

	// Restart all.
	for i := range c.nodes {
		c.nodes[i].kill(t)
	}
	for i := range c.nodes {
		c.restart(i)
	}
	requireStreamHolds(t, js, 2, 3)
	info := consumerState(t, js)
	require.True(t, info.Config.MemoryStorage, "config kept")
	require.Equal(t, memTestConsumer, info.Config.Durable)
	t.Logf("after a full restart: delivered %+v, ack floor %+v, pending %d, ack pending %d, redelivered %d",
		info.Delivered, info.AckFloor, info.NumPending, info.NumAckPending, info.NumRedelivered)
	require.Equal(t, uint64(1), info.Delivered.Stream, "starts at the stream's first message")
	require.Zero(t, info.AckFloor.Stream)
	require.Zero(t, info.NumAckPending)
	require.Equal(t, uint64(2), info.NumPending)
	require.Equal(t, []string{"memtest.m2 #1", "memtest.m3 #1"}, memTestFetch(t, js, 2).seen, "after a full restart")
}

// ax's records fence what a memory-stored consumer's lost state brings
// back: the server (ax dev, which provisions the consumers again when it
// starts) is SIGKILLed under load and restarted while the workers keep
// running, so every task not yet acknowledged is delivered again as a
// first delivery, some while their first execution still runs. Every task
// succeeds, no two executions of a task overlap, and no task applies its
// effect twice (the probe journals; [journal.requireOneEffect]).
func TestServerRestartMemoryConsumers(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--memory-consumers")
	m.spawn()
	m.spawn()
	// Long tasks first, the oldest messages of their shards: when the
	// consumers come back they are delivered again at once, as first
	// deliveries, while their first executions still run. Then a backlog
	// (32 slots at 200-400 ms a task: about 30 s).
	long := m.submitProbes(20, 20000, 24000)
	ids := append(long, m.submitProbes(restartTasks, 200, 400)...)
	// The kill comes once a tenth of the tasks ran and while long ones
	// run (a loaded machine ran a quarter only after the long ones ended).
	require.Eventually(t, func() bool {
		return m.states(ids)[kv.StateSucceeded] > len(ids)/10 && m.states(long)[kv.StateRunning] > 0
	}, 3*time.Minute, 200*time.Millisecond, "a tenth of the tasks ran while long ones ran")

	m.dev.kill(t)
	m.dev = devAt(t, m.url, m.data, "--ack-wait", faultAckWait, "--memory-consumers")
	require.Contains(t, m.dev.output(), fmt.Sprintf("provisioned: created %d,", streams.Priorities*streams.Shards),
		"the restarted server forgot the consumers and ax dev made them again")
	_, m.js = connect(t, m.url)
	var err error
	m.client, err = ax.NewClient(context.Background(), m.js, nil)
	require.NoError(t, err)
	info, err := m.js.Consumer(context.Background(), "AX_P0", "p0-s00")
	require.NoError(t, err)
	require.True(t, info.CachedInfo().Config.MemoryStorage)
	before := m.states(ids)
	t.Logf("after the restart: %v", before)
	require.Zero(t, before["MISSING"], "records lost across the restart")

	m.waitSucceeded(ids, 5*time.Minute, nil)
	require.Zero(t, m.states(ids)[kv.StateRunning])
	m.requireEffects(ids)
	j := m.readJournals()
	effects := j.requireOneEffect(t)
	_, afterAbort, afterError := j.requireExplainedReexecutions(t)
	runs := map[int]int{}
	for _, id := range ids {
		runs[len(j.executions[id])]++
	}
	superseded := 0
	for _, w := range m.all {
		superseded += strings.Count(w.output(), "delivery superseded")
	}
	t.Logf("server restart, memory-stored consumers: %d tasks, lost 0, overlapping executions 0, tasks by executions %v "+
		"(re-executions after a self-fenced execution %d, after a failure %d); deliveries left as superseded %d; %s",
		len(ids), runs, afterAbort, afterError, superseded, effects)
	require.Less(t, before[kv.StateSucceeded], len(ids), "the restart came after the run")
}

// On a single `ax server`, a restart removes memory-stored consumers:
// the running worker waits, and a worker started then waits for the
// deployment, naming what is missing, until `ax
// provision --memory-consumers` makes them again; then the task submitted
// meanwhile runs (docs/OPERATIONS.md, "Memory-stored consumers").
func TestMemoryConsumersProvisionAgainAfterARestart(t *testing.T) {
	t.Parallel()
	port, data, journal := freePort(t), t.TempDir(), t.TempDir()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	args := []string{"server", "--name", "s1", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data", data}
	srv := startAx(t, args...)
	provision := func() {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := axOutput("provision", "--server", url, "--memory-consumers", "--ack-wait", faultAckWait)
			assert.NoError(ct, err)
		}, time.Minute, 500*time.Millisecond)
	}
	provision()
	worker := func(id string) *process {
		return startAx(t, "worker", "--server", url, "--id", id, "--concurrency", "4", "--ack-wait", faultAckWait,
			"--grace", "1s", "--log-format", "json", "--probe-journal", filepath.Join(journal, id+".jsonl"))
	}
	w1 := worker("w1")
	_, js := connect(t, url)
	client, err := ax.NewClient(context.Background(), js, nil)
	require.NoError(t, err)
	state := func(id string) kv.State {
		rec, _, err := storeGet(context.Background(), client.Store(), id)
		if err != nil {
			return "MISSING"
		}
		return rec.State
	}
	submit := func() string {
		var id string
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			info, err := client.Submit(context.Background(), ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":5}`)})
			if assert.NoError(ct, err) {
				id = info.ID
			}
		}, time.Minute, 500*time.Millisecond)
		return id
	}
	first := submit()
	require.Eventually(t, func() bool { return state(first) == kv.StateSucceeded }, time.Minute, 100*time.Millisecond)

	srv.kill(t)
	startAx(t, args...)
	second := submit()
	require.Never(t, func() bool { return state(second) != kv.StateReady }, 3*time.Second, 100*time.Millisecond,
		"no consumer: nothing delivers the task")
	w2 := worker("w2")
	require.Eventually(t, func() bool {
		return strings.Contains(w2.output(), "shard consumer AX_P0/p0-s00 (provision the deployment first)")
	}, time.Minute, 100*time.Millisecond)

	provision()
	require.Eventually(t, func() bool { return state(second) == kv.StateSucceeded }, time.Minute, 100*time.Millisecond)
	require.False(t, w1.exited(), "w1 exited:\n%s", w1.output())
	require.False(t, w2.exited(), "w2 exited:\n%s", w2.output())
}
