package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// journal counts the executions of each task id by a handler.
type journal struct {
	mu  sync.Mutex
	ran map[string]int
}

func newJournal() *journal { return &journal{ran: map[string]int{}} }

func (j *journal) handle(_ context.Context, task *worker.Task) error {
	j.mu.Lock()
	j.ran[task.ID]++
	j.mu.Unlock()
	return nil
}

func (j *journal) count(id string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ran[id]
}

func (j *journal) ids() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]string, 0, len(j.ran))
	for id := range j.ran {
		out = append(out, id)
	}
	return out
}

// letterSeqs returns the sequences of the dead letters in AX_DLQ by task id.
func letterSeqs(t *testing.T, js jetstream.JetStream) map[string][]uint64 {
	t.Helper()
	ctx := context.Background()
	stream, err := js.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	out := map[string][]uint64{}
	for seq := stream.CachedInfo().State.FirstSeq; ; {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("ax.dlq.>"))
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			return out
		}
		seq = msg.Sequence + 1
		l := streams.ParseDeadLetter(msg.Subject, msg.Header)
		out[l.TaskID] = append(out[l.TaskID], msg.Sequence)
	}
}

// submitMixed submits one "report" task in one of three ways (Go client,
// raw with a Nats-Msg-Id, raw without) and returns its id.
func submitMixed(t *testing.T, b *unservedBundle, i int) string {
	t.Helper()
	ctx := context.Background()
	switch i % 3 {
	case 0:
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: fmt.Sprintf("k%d", i%5)})
		require.NoError(t, err)
		return info.ID
	case 1:
		raw := nats.NewMsg(fmt.Sprintf("ax.submit.p%d.acme.report.k%d", i%5, i%5))
		raw.Data = []byte("raw")
		id := fmt.Sprintf("raw-%d-%d", i, time.Now().UnixNano())
		raw.Header.Set(jetstream.MsgIDHeader, id)
		_, err := b.JS.PublishMsg(ctx, raw)
		require.NoError(t, err)
		return id
	default:
		ack, err := b.JS.Publish(ctx, fmt.Sprintf("ax.submit.p%d.acme.report.k%d", i%5, i%5), []byte("no id"))
		require.NoError(t, err)
		return streams.FallbackID(ack.Stream, ack.Sequence, natstest.GetMsg(t, b.JS, ack.Stream, ack.Sequence).Time)
	}
}

// requireOutcomes checks each task ran exactly once and SUCCEEDED with no
// letter, or never ran and is DEAD naming its one letter; and that no
// letter names a task that is not DEAD, and no task ran that was not
// submitted.
func requireOutcomes(t *testing.T, b *unservedBundle, j *journal, ids []string) (succeeded, dead int) {
	t.Helper()
	succeeded, dead, orphans := outcomes(t, b, j, ids)
	require.Empty(t, orphans, "letters no record names")
	return succeeded, dead
}

// outcomes checks each task ran exactly once and SUCCEEDED, or never ran
// and is DEAD naming one of its letters; it returns the letters (by task
// id) that no record names: orphans of a burial whose outcome was unknown.
func outcomes(t *testing.T, b *unservedBundle, j *journal, ids []string) (succeeded, dead int, orphans map[string][]uint64) {
	t.Helper()
	seqs := letterSeqs(t, b.JS)
	orphans = map[string][]uint64{}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		rec := b.record(t, id)
		switch rec.State {
		case kv.StateSucceeded:
			succeeded++
			require.Equal(t, 1, j.count(id), "SUCCEEDED task %s ran %d times", id, j.count(id))
			if len(seqs[id]) > 0 {
				orphans[id] = seqs[id]
			}
		case kv.StateDead:
			dead++
			require.Zero(t, j.count(id), "DEAD task %s ran", id)
			require.Contains(t, seqs[id], rec.DLQSeq, "DEAD task %s names no letter of it", id)
			require.Contains(t, rec.LastError, "unserved")
			for _, seq := range seqs[id] {
				if seq != rec.DLQSeq {
					orphans[id] = append(orphans[id], seq)
				}
			}
		default:
			t.Fatalf("task %s is %s", id, rec.State)
		}
	}
	for id := range seqs {
		require.True(t, want[id], "letter names unknown task %s", id)
	}
	for _, id := range j.ids() {
		require.True(t, want[id], "ran unknown task %s", id)
	}
	return succeeded, dead, orphans
}

// Workers of the type join and leave while the leader buries (deadline 1s,
// a pass each 50ms): every task either runs exactly once and SUCCEEDED
// with no letter, or never runs and is DEAD naming its one letter. Nothing
// is lost, nothing runs twice, no letter is orphaned.
func TestUnservedDeadlineChurn(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	j := newJournal()
	// A first worker of the type creates its consumers and runs one task.
	warm := submitMixed(t, b, 0)
	started := time.Now()
	reporter, _ := b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", j.handle), Concurrency: 1})
	require.Eventually(t, func() bool { return j.count(warm) == 1 }, 20*time.Second, 10*time.Millisecond)
	t.Logf("first task ran %s after its worker started", time.Since(started))
	axtest.Stop(t, reporter)
	b.setDeadline(t, "report", time.Second)
	ids := []string{warm}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for round := range 4 {
		for i := range 30 {
			ids = append(ids, submitMixed(t, b, round*30+i))
		}
		// The worker joins around the moment the burials start (a deadline
		// after the submits), stays a while, and leaves.
		time.Sleep(800*time.Millisecond + time.Duration(rng.IntN(500))*time.Millisecond)
		reporter, _ := b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", j.handle), Concurrency: 1})
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		axtest.Stop(t, reporter)
		time.Sleep(time.Second) // unserved again for a deadline
	}
	// A last batch with no worker at all: buried for sure, so the run
	// checks burials whether or not the churn's timing produced any (a
	// loaded machine stops workers slowly and may keep the type served).
	var last []string
	for i := range 10 {
		last = append(last, submitMixed(t, b, 120+i))
	}
	b.waitStates(t, last, 30*time.Second, kv.StateDead)
	ids = append(ids, last...)
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", j.handle), Concurrency: 1})
	b.waitStates(t, ids, 30*time.Second, kv.StateSucceeded, kv.StateDead)
	time.Sleep(500 * time.Millisecond) // a late execution or letter would show
	succeeded, dead := requireOutcomes(t, b, j, ids)
	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	t.Logf("%d tasks: %d succeeded, %d dead; %d letters deleted after a lost compare-and-set", len(ids), succeeded, dead,
		dlq.CachedInfo().State.LastSeq-dlq.CachedInfo().State.Msgs)
	require.NotZero(t, succeeded, "no worker ran a task: the churn raced nothing")
	require.NotZero(t, dead)
}

// A replay while the type is still unserved waits again and is buried
// again a deadline later: one letter, the record naming it.
func TestUnservedDeadlineReplayWhileUnserved(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	b.setDeadline(t, "report", time.Second)
	ids := []string{submitMixed(t, b, 0), submitMixed(t, b, 1), submitMixed(t, b, 2)}
	deadAll := func() {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, id := range ids {
				assert.Equal(c, kv.StateDead, b.record(t, id).State, id)
			}
		}, 20*time.Second, 50*time.Millisecond)
	}
	deadAll()
	for _, id := range ids {
		reply, err := b.api.Replay(ctx, admin.DLQReplayRequest{ID: id})
		require.NoError(t, err)
		require.Len(t, reply.Replayed, 1, "%+v", reply)
		require.Equal(t, id, reply.Replayed[0].ID, "%+v", reply)
	}
	replayed := time.Now()
	deadAll()
	require.GreaterOrEqual(t, time.Since(replayed), time.Second-100*time.Millisecond)
	for _, id := range ids {
		rec := b.record(t, id)
		require.Equal(t, "unserved", rec.Trail[len(rec.Trail)-1].Action, id)
	}
	requireOutcomes(t, b, newJournal(), ids)
}

// On the default layout a deadline applies to the types no live worker has
// a handler for (kv.Member.Handles). While a live member of an earlier
// release, which does not say what it handles, is there, every type counts
// as served and nothing is buried; once only a worker without a "report"
// handler is left, the waiting report tasks (a Go submit and a raw publish)
// are dead-lettered with the reason. Before, a deadline did nothing on the
// default layout.
func TestUnservedDeadlineOnDefaultLayout(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, scheduler.Config{UnservedInterval: 20 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	ctx := context.Background()
	api := lb.StartAdmin(t, nil)
	workers, err := lb.JS.KeyValue(ctx, "AX_WORKERS")
	require.NoError(t, err)
	data, err := json.Marshal(kv.Member{ID: "old", Shards: []int{}})
	require.NoError(t, err)
	lease, err := json.Marshal(kv.LeaseRecord{Holder: "old", RenewedAt: time.Now(), TTL: kv.Duration(time.Hour), Data: data})
	require.NoError(t, err)
	_, err = workers.Put(ctx, "old", lease)
	require.NoError(t, err)

	_, err = api.SetUnservedDeadline(ctx, "report", time.Second)
	require.NoError(t, err)
	info, err := lb.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
	require.NoError(t, err)
	ack, err := lb.JS.Publish(ctx, "ax.submit.p2.acme.report.k", []byte("raw"))
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond)
	rec, _, err := lb.Client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, rec.State, "a member that does not say what it handles serves every type")
	natstest.GetMsg(t, lb.JS, ack.Stream, ack.Sequence) // still there

	require.NoError(t, workers.Delete(ctx, "old"))
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("x", func(context.Context, *worker.Task) error { return nil }, nil))
	lb.StartWorker(t, worker.Config{Registry: reg})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rec, _, err := lb.Client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		if assert.NoError(c, err) {
			assert.Equal(c, kv.StateDead, rec.State)
			assert.Contains(c, rec.LastError, `unserved: no live worker served task type "report"`)
		}
	}, 30*time.Second, 50*time.Millisecond)
	stream, err := lb.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == 2
	}, 30*time.Second, 50*time.Millisecond, "both report tasks dead-lettered")
}

// A raw publish of an unserved type with a malformed header (one a worker
// would dead-letter with the cause) must not escape the deadline: it is
// buried like any other, or the bucket keeps it forever.
func TestUnservedDeadlineBuriesMalformed(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	b.setDeadline(t, "report", time.Second)
	var ids []string
	for i, h := range []map[string]string{
		{jetstream.MsgIDHeader: "bad-timeout", "Ax-Timeout": "forever"},
		{jetstream.MsgIDHeader: "bad-attempts", "Ax-Max-Attempts": "0"},
		{"Ax-Deadline": "tomorrow"},
	} {
		raw := nats.NewMsg(fmt.Sprintf("ax.submit.p%d.acme.report.k", i))
		raw.Data = []byte("malformed")
		for k, v := range h {
			raw.Header.Set(k, v)
		}
		ack, err := b.JS.PublishMsg(ctx, raw)
		require.NoError(t, err)
		id := h[jetstream.MsgIDHeader]
		if id == "" {
			id = streams.FallbackID(ack.Stream, ack.Sequence, natstest.GetMsg(t, b.JS, ack.Stream, ack.Sequence).Time)
		}
		ids = append(ids, id)
	}
	b.waitStates(t, ids, 10*time.Second, kv.StateDead)
	requireOutcomes(t, b, newJournal(), ids)
}

// A producer's message naming a task whose record names another message (a
// duplicate id in another bucket) is one a worker of the type drops. With
// no worker it must not escape the deadline and keep its place in the
// bucket forever: the leader removes it, burying nothing for it and leaving
// the task it names alone. Another tenant's message with the id is that
// tenant's own task (a task id belongs to its tenant), buried as its own.
func TestUnservedDeadlineDropsDuplicates(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	mine, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", Priority: ax.PriorityOf(1)})
	require.NoError(t, err)
	other, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "x", Key: "k", Tenant: "globex"})
	require.NoError(t, err)
	store := b.Client.Store()
	state := func(ref kv.Ref) kv.State {
		rec, _, err := store.Get(ctx, ref)
		if err != nil {
			return ""
		}
		return rec.State
	}
	mineRef, otherRef := kv.Ref{Tenant: mine.Tenant, ID: mine.ID}, kv.Ref{Tenant: "globex", ID: other.ID}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, kv.StateSucceeded, state(otherRef))
	}, 10*time.Second, 20*time.Millisecond)
	for _, dup := range []struct{ subject, id string }{
		{"ax.submit.p3.default.report.k", mine.ID}, // same task, another bucket (no dedup)
		{"ax.submit.p0.acme.report.k", other.ID},   // globex's id: acme's own task
		{"ax.submit.p4.evil.report.z", mine.ID},    // the id under another tenant: evil's own task
	} {
		raw := nats.NewMsg(dup.subject)
		raw.Data = []byte("dup")
		raw.Header.Set(jetstream.MsgIDHeader, dup.id)
		ack, err := b.JS.PublishMsg(ctx, raw)
		require.NoError(t, err)
		require.False(t, ack.Duplicate, dup.subject)
	}
	owned := []kv.Ref{{Tenant: "acme", ID: other.ID}, {Tenant: "evil", ID: mine.ID}}
	b.setDeadline(t, "report", time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, kv.StateDead, state(mineRef))
		for _, ref := range owned {
			assert.Equal(c, kv.StateDead, state(ref), "%v is buried as its own task", ref)
		}
		for p := range streams.Priorities {
			stream, err := b.JS.Stream(ctx, streams.Names{}.PriorityStream(p))
			if assert.NoError(c, err) {
				assert.Zero(c, stream.CachedInfo().State.Msgs, "P%d keeps a duplicate of an unserved type", p)
			}
		}
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, kv.StateSucceeded, state(otherRef), "globex's task is left alone")
	letters := map[kv.Ref]int{}
	for _, l := range letters2(t, b.JS) {
		letters[kv.Ref{Tenant: l.Tenant, ID: l.TaskID}]++
	}
	require.Equal(t, map[kv.Ref]int{mineRef: 1, owned[0]: 1, owned[1]: 1}, letters)
}

// letters2 returns every dead letter in AX_DLQ.
func letters2(t *testing.T, js jetstream.JetStream) []streams.Letter {
	t.Helper()
	ctx := context.Background()
	stream, err := js.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	var out []streams.Letter
	for seq := stream.CachedInfo().State.FirstSeq; ; {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("ax.dlq.>"))
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			return out
		}
		seq = msg.Sequence + 1
		out = append(out, streams.ParseDeadLetter(msg.Subject, msg.Header))
	}
}

// The leader's connection dies while it buries (a few burials a pass) and
// a worker of the type comes and goes: the other contender takes over and
// finishes the burials. Every task runs exactly once or is DEAD naming a
// letter of it; a burial cut off between its letter and its
// compare-and-set may leave an orphan letter (counted, not refused).
func TestUnservedDeadlineFailover(t *testing.T) {
	t.Parallel()
	b := setupUnservedWith(t, 2, scheduler.Config{AgingBatch: 3})
	b.setDeadline(t, "report", time.Second)
	j := newJournal()
	var ids []string
	for i := range 60 {
		ids = append(ids, submitMixed(t, b, i))
	}
	require.Eventually(t, func() bool { // burials under way
		return len(letterSeqs(t, b.JS)) >= 5
	}, 10*time.Second, 5*time.Millisecond)
	b.leader.NC.Close()
	next := waitLeader(t, b.follower())
	require.NotNil(t, next)
	for i := range 30 {
		ids = append(ids, submitMixed(t, b, 100+i))
	}
	time.Sleep(1200 * time.Millisecond)
	reporter, _ := b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", j.handle), Concurrency: 1})
	time.Sleep(200 * time.Millisecond)
	axtest.Stop(t, reporter)
	time.Sleep(1200 * time.Millisecond)
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", j.handle), Concurrency: 1})
	b.waitStates(t, ids, 30*time.Second, kv.StateSucceeded, kv.StateDead)
	time.Sleep(500 * time.Millisecond)
	succeeded, dead, orphans := outcomes(t, b, j, ids)
	t.Logf("%d tasks: %d succeeded, %d dead, orphan letters %v", len(ids), succeeded, dead, orphans)
}

// Operators cancel, pause and reprioritize tasks while the leader buries
// them: each task ends in exactly one of the operator's state (no letter)
// or DEAD naming its one letter; none runs, none is lost.
func TestUnservedDeadlineRacesOperators(t *testing.T) {
	t.Parallel()
	b := setupUnservedWith(t, 1, scheduler.Config{AgingBatch: 2})
	ctx := context.Background()
	b.setDeadline(t, "report", time.Second)
	var ids []string
	for i := range 45 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: fmt.Sprintf("k%d", i%7)})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	require.Eventually(t, func() bool { return len(letterSeqs(t, b.JS)) >= 2 }, 10*time.Second, 5*time.Millisecond)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := admin.TaskRequest{ID: id}
			switch i % 3 {
			case 0:
				_, _ = b.api.Cancel(ctx, req)
			case 1:
				_, _ = b.api.Pause(ctx, req)
			default:
				_, _ = b.api.Reprioritize(ctx, admin.ReprioritizeRequest{ID: id, Priority: 0})
			}
		}()
	}
	wg.Wait()
	counts := map[kv.State]int{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		counts = map[kv.State]int{}
		for i, id := range ids {
			s := b.record(t, id).State
			counts[s]++
			switch i % 3 {
			case 0:
				assert.Contains(c, []kv.State{kv.StateCancelled, kv.StateDead}, s, id)
			case 1:
				assert.Contains(c, []kv.State{kv.StatePaused, kv.StateDead}, s, id)
			default:
				assert.Equal(c, kv.StateDead, s, id) // reprioritized, then buried a deadline later
			}
		}
	}, 20*time.Second, 50*time.Millisecond)
	seqs := letterSeqs(t, b.JS)
	for _, id := range ids {
		rec := b.record(t, id)
		if rec.State == kv.StateDead {
			require.Equal(t, []uint64{rec.DLQSeq}, seqs[id], id)
		} else {
			require.Empty(t, seqs[id], "%s is %s with letters", id, rec.State)
		}
	}
	t.Logf("outcomes: %v", counts)
}

// Tasks an operator paused keep their messages at the head of the bucket;
// however many they are, the tasks behind them are still buried at the
// deadline (each pass looks at a bounded number of messages: 10 here).
func TestUnservedDeadlinePastPausedHead(t *testing.T) {
	t.Parallel()
	b := setupUnservedWith(t, 1, scheduler.Config{AgingBatch: 1})
	ctx := context.Background()
	for range 25 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
		require.NoError(t, err)
		_, err = b.api.Pause(ctx, admin.TaskRequest{ID: info.ID})
		require.NoError(t, err)
	}
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
	require.NoError(t, err)
	b.setDeadline(t, "report", time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, kv.StateDead, b.record(t, info.ID).State)
	}, 10*time.Second, 50*time.Millisecond)
}

// A producer's message naming a task an operator cancelled by id before
// any message of it came is one a worker drops: with no worker it must not
// keep its place in the bucket past the deadline either.
func TestUnservedDeadlineDropsMessageOfCancelledID(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	_, err := b.api.Cancel(ctx, admin.TaskRequest{ID: "ghost", Tenant: "acme", Unseen: true})
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, b.record(t, "ghost").State)
	raw := nats.NewMsg("ax.submit.p1.acme.report.k")
	raw.Header.Set(jetstream.MsgIDHeader, "ghost")
	_, err = b.JS.PublishMsg(ctx, raw)
	require.NoError(t, err)
	b.setDeadline(t, "report", time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stream, err := b.JS.Stream(ctx, "AX_P1")
		if assert.NoError(c, err) {
			assert.Zero(c, stream.CachedInfo().State.Msgs)
		}
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, kv.StateCancelled, b.record(t, "ghost").State)
	require.Empty(t, letterSeqs(t, b.JS))
}

// A deadline set just after a type's last worker left counts from when
// that worker left, not from the leader's election: the leader tracks
// when each type was last served before any deadline is set.
func TestUnservedDeadlineSetAfterTheWorkerLeft(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	const deadline = 2 * time.Second
	release := make(chan struct{})
	var first atomic.Value // the id of the one task that succeeds
	reporter, _ := b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", func(ctx context.Context, task *worker.Task) error {
		if first.CompareAndSwap(nil, task.ID) {
			<-release // holds the only slot until the test lets it go
			return nil
		}
		// A task the slot took between the release and the stop (seen
		// in a local CI run) runs until Stop cancels it, and is put back.
		<-ctx.Done()
		return ctx.Err()
	}), Concurrency: 1})
	var ids []string
	for range 3 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", MaxAttempts: 5})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	time.Sleep(2 * deadline) // the tasks wait longer than the deadline, behind a live worker
	close(release)
	stopped := time.Now()
	axtest.Stop(t, reporter)
	_, err := b.api.SetUnservedDeadline(ctx, "report", deadline)
	require.NoError(t, err)
	ids = slices.DeleteFunc(ids, func(id string) bool { return id == first.Load() })
	require.Len(t, ids, 2, "the tasks that did not succeed")
	b.waitStates(t, ids, 30*time.Second, kv.StateDead)
	for _, id := range ids {
		trail := b.record(t, id).Trail
		buried := trail[len(trail)-1].At
		// Up to a pass before the stop (TestUnservedDeadlineCountsFromTheLastServedMoment).
		require.GreaterOrEqual(t, buried.Sub(stopped), deadline/2,
			"%s buried %s after the type's last worker stopped, before its deadline of %s", id, buried.Sub(stopped), deadline)
	}
}

// A deadline written into AX_CONTROL by hand outside the verb's bounds (a
// bare number is nanoseconds: 60 is not a minute) buries nothing: the
// leader applies only deadlines the verb would accept.
func TestUnservedDeadlineIgnoresOutOfBounds(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	board, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	_, err = board.Put(ctx, control.UnservedDeadlinesKey, []byte(`{"deadlines":{"report":60,"x":"-1h"}}`))
	require.NoError(t, err)
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond) // 30 passes
	require.Equal(t, kv.StateReady, b.record(t, info.ID).State)
	require.Empty(t, letterSeqs(t, b.JS))
}

// A task whose burial a worker decided (its dead letter could not be
// written: the record is RETRYING with Burying set) keeps that cause when
// the leader buries it for its unserved type: the operator sees why it
// died, not only that no worker came back to write its letter.
func TestUnservedDeadlineKeepsADecidedBurialsCause(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k"})
	require.NoError(t, err)
	store := b.Client.Store()
	rec, rev, err := store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	rec, rev, err = store.Apply(ctx, rec, rev, kv.StateRunning, kv.Actor{Worker: "w", Action: "claim"}, func(r *kv.Record) error {
		r.Attempt, r.Worker, r.Delivery = 1, "w", 1
		return nil
	})
	require.NoError(t, err)
	const cause = "attempt 1/1: boom"
	_, _, err = store.Apply(ctx, rec, rev, kv.StateRetrying, kv.Actor{Worker: "w", Action: "burying", Error: "dead-letter stream unavailable"}, func(r *kv.Record) error {
		r.Burying, r.LastError = cause, cause
		return nil
	})
	require.NoError(t, err)
	b.setDeadline(t, "report", time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, kv.StateDead, b.record(t, info.ID).State)
	}, 10*time.Second, 50*time.Millisecond)
	rec = b.record(t, info.ID)
	require.Contains(t, rec.LastError, cause)
	require.Contains(t, letters(t, b.JS)[info.ID].Error, cause)
}

// A raw publish with a run time (Ax-Run-At) waits for it like a Go submit
// with RunAt (which waits in AX_DELAYED): its unserved deadline counts
// from its run time, not from when it was published.
func TestUnservedDeadlineCountsFromARawRunTime(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	b.setDeadline(t, "report", time.Second)
	runAt := time.Now().Add(4 * time.Second)
	raw := nats.NewMsg("ax.submit.p1.acme.report.k")
	raw.Header.Set(jetstream.MsgIDHeader, "later")
	raw.Header.Set("Ax-Run-At", runAt.UTC().Format(time.RFC3339Nano))
	_, err := b.JS.PublishMsg(ctx, raw)
	require.NoError(t, err)
	time.Sleep(3 * time.Second)
	require.Equal(t, kv.Record{}.State, b.record(t, "later").State, "buried before its run time")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, kv.StateDead, b.record(t, "later").State)
	}, 15*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, b.record(t, "later").Trail[0].At.Sub(runAt), time.Second-100*time.Millisecond)
}

// A worker of the type joins while the leader buries hundreds of tasks in
// one pass: each task either ran once (SUCCEEDED, its letter deleted when
// the leader lost the compare-and-set) or is DEAD naming its one letter.
func TestUnservedDeadlineWorkerJoinsMidBurial(t *testing.T) {
	t.Parallel()
	b := setupUnserved(t)
	ctx := context.Background()
	j := newJournal()
	warm := submitMixed(t, b, 0) // the type's consumers exist before the race
	reporter, _ := b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "report", j.handle), Concurrency: 1})
	require.Eventually(t, func() bool { return j.count(warm) == 1 }, 20*time.Second, 10*time.Millisecond)
	axtest.Stop(t, reporter)
	ids := []string{warm}
	for i := range 300 {
		ids = append(ids, submitMixed(t, b, i))
	}
	b.setDeadline(t, "report", time.Second)
	require.Eventually(t, func() bool { return len(letterSeqs(t, b.JS)) >= 1 }, 20*time.Second, time.Millisecond)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", j.handle, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 16})
	b.waitStates(t, ids, 60*time.Second, kv.StateSucceeded, kv.StateDead)
	time.Sleep(500 * time.Millisecond)
	succeeded, dead := requireOutcomes(t, b, j, ids)
	dlq, err := b.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	t.Logf("%d tasks: %d succeeded, %d dead; %d letters deleted after a lost compare-and-set", len(ids), succeeded, dead,
		dlq.CachedInfo().State.LastSeq-dlq.CachedInfo().State.Msgs)
}
