package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file attack the task-identity model of the wire
// contract v2 (docs/WIRE.md): races between movers, lost and ambiguous
// compare-and-sets, orphan copies, hostile producers and records that
// outlive or precede their messages.

// gone reports whether task id has no record.
func (b *meshBundle) gone(t tb, id string) bool {
	t.Helper()
	_, _, err := storeGet(context.Background(), b.store, id)
	if errors.Is(err, kv.ErrNotFound) {
		return true
	}
	require.NoError(t, err)
	return false
}

// nothingWaits fails the attempt of c while a schedule or a fired schedule
// waits in AX_DELAYED or a message in a priority bucket.
func (b *meshBundle) nothingWaits(c *assert.CollectT) {
	for _, name := range []string{"AX_DELAYED", "AX_P0", "AX_P1", "AX_P2", "AX_P3", "AX_P4"} {
		assert.True(c, b.bucketEmpty(c, name), "%s is empty", name)
	}
}

// A delayed submit of an id an operator paused before any message named
// it is the task that id was held for: it is accepted (not a duplicate),
// and runs once the operator resumes it.
//
// Fails at 7ef3887: the submit answers Duplicate and schedules nothing;
// the resume then deletes the record born unseen, and the accepted task is
// gone without a trace.
func TestDelayedSubmitOfPausedUnseenIDRuns(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	b.startWorker(t)
	ctx := context.Background()
	require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: "held", Tenant: ax.DefaultTenant, Unseen: true}, nil))
	info, err := b.client.Submit(ctx, ax.TaskSpec{ID: "held", Type: "ident", Payload: payload(t, identityArgs{}), Delay: time.Second})
	require.NoError(t, err)
	require.False(t, info.Duplicate, "the first message of a held id is not a duplicate")
	require.NoError(t, b.call(admin.VerbTaskResume, admin.TaskRequest{ID: "held"}, nil))
	b.waitState(t, "held", 20*time.Second, kv.StateSucceeded)
	require.Equal(t, 1, b.log.count("held"))
}

// A delayed task cancelled long before its run time stays cancelled after
// its CANCELLED record expires (retention, 24 h by default, shorter than
// the delay: here 1 s and 4 s).
//
// Fails at 7ef3887: the cancel leaves the schedule in AX_DELAYED; when it
// fires the mover finds no record, releases it as a new task, and the
// cancelled task runs.
func TestCancelledDelayedTaskNeverRunsAfterItsRecordExpires(t *testing.T) {
	t.Parallel()
	b := setupMeshWith(t, kv.StoreConfig{Retention: time.Second})
	b.startWorker(t)
	id := b.submit(t, ax.TaskSpec{ID: "cx-delayed", Payload: payload(t, identityArgs{}), Delay: 4 * time.Second})
	require.NoError(t, b.call(admin.VerbTaskCancel, admin.TaskRequest{ID: id}, nil))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, b.gone(c, id)) }, 10*time.Second, 50*time.Millisecond, "the CANCELLED record expires")
	// Nothing of it is left to fire or run (with the mover and a worker
	// running): no schedule, no copy in a bucket.
	require.EventuallyWithT(t, b.nothingWaits, 20*time.Second, 50*time.Millisecond)
	require.Zero(t, b.log.count(id), "a cancelled task ran")
	require.True(t, b.gone(t, id), "a cancelled task was re-created")
}

// A READY task cancelled while no worker runs stays cancelled after its
// CANCELLED record expires.
//
// Fails at 7ef3887: the cancel leaves the task's message in its bucket;
// the first worker to see it after the record expired creates a new
// record and runs the cancelled task.
func TestCancelledReadyTaskNeverRunsAfterItsRecordExpires(t *testing.T) {
	t.Parallel()
	b := setupMeshWith(t, kv.StoreConfig{Retention: time.Second})
	id := b.submit(t, ax.TaskSpec{ID: "cx-ready", Priority: ax.P3, Payload: payload(t, identityArgs{})})
	require.NoError(t, b.call(admin.VerbTaskCancel, admin.TaskRequest{ID: id}, nil))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, b.gone(c, id)) }, 10*time.Second, 50*time.Millisecond, "the CANCELLED record expires")
	b.startWorker(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, b.bucketEmpty(c, "AX_P3")) }, 20*time.Second, 50*time.Millisecond)
	require.Zero(t, b.log.count(id), "a cancelled task ran")
}

// bucketEmpty reports whether stream name holds no message.
func (b *meshBundle) bucketEmpty(t tb, name string) bool {
	t.Helper()
	s, err := b.js.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs == 0
}

// A delayed task paused past its run time (its schedule fired; the mover
// keeps looking at it) and then cancelled stays cancelled after its record
// expires. Held at 7ef3887: the mover looks again every PausedRecheck,
// sees CANCELLED and deletes the fired schedule before the record expires.
func TestCancelledPausedDelayedTaskNeverRuns(t *testing.T) {
	t.Parallel()
	b := setupMeshWith(t, kv.StoreConfig{Retention: time.Second})
	b.startWorker(t)
	id := b.submit(t, ax.TaskSpec{ID: "cx-paused", Payload: payload(t, identityArgs{}), Delay: 1500 * time.Millisecond})
	require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: id}, nil))
	require.EventuallyWithT(t, func(c *assert.CollectT) { // past its run time: the schedule fired, the mover holds it
		s, err := b.js.Stream(context.Background(), "AX_DELAYED")
		if assert.NoError(c, err) {
			_, err = s.GetLastMsgForSubject(context.Background(), streams.Names{}.DueSubject(ax.DefaultTenant, id))
			assert.NoError(c, err, "the schedule fired")
		}
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, kv.StatePaused, b.get(t, id).State)
	require.NoError(t, b.call(admin.VerbTaskCancel, admin.TaskRequest{ID: id}, nil))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, b.gone(c, id)) }, 10*time.Second, 50*time.Millisecond, "the CANCELLED record expires")
	// The mover looks again (every 200 ms here) and drops the fired
	// schedule; had it released it, a copy would wait or have run.
	require.EventuallyWithT(t, b.nothingWaits, 20*time.Second, 50*time.Millisecond)
	require.Zero(t, b.log.count(id), "a cancelled task ran")
	require.True(t, b.gone(t, id), "a cancelled task was re-created")
}

// An aging move whose compare-and-set comes late (the leader froze, or was
// SIGSTOPped, between its publish and its compare-and-set) must not name a
// copy that workers have already dropped as an orphan. The task's own
// message waits meanwhile in a P3 shard whose consumer is paused, as the
// backpressure loop pauses P3 and P4. The test does aging's steps by hand
// (streams.TaskCopy, the compare-and-set on the revision read before the
// publish, then the delete of the old message on success, or of the copy
// on a definite conflict), with the freeze between the first two.
//
// Fails at 3fb2086: the orphan copy is acked away 30 s after it was
// stored without touching the record, so the late compare-and-set still
// matches the revision it read: the record names a deleted message, the
// task's own message is deleted next, and the task is READY forever.
func TestLateAgingCASCannotNameADroppedOrphan(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	names := streams.DefaultNames()
	id := b.submit(t, ax.TaskSpec{ID: "frozen-aging", Priority: ax.P3, Payload: payload(t, identityArgs{})})
	consumer := names.ConsumerName(3, streams.Shard(id))
	_, err := b.js.PauseConsumer(ctx, "AX_P3", consumer, time.Now().Add(time.Hour))
	require.NoError(t, err)

	// Aging: read the record, publish the copy one level up.
	rec, rev, err := storeGet(ctx, b.store, id)
	require.NoError(t, err)
	src, err := b.js.Stream(ctx, "AX_P3")
	require.NoError(t, err)
	raw, err := src.GetMsg(ctx, rec.StreamSeq)
	require.NoError(t, err)
	copyMsg := streams.TaskCopy(names.CopySubject(2, rec.Tenant, rec.Type, rec.Key), raw.Data, raw.Header, id, rec.Gen+1, nuid.Next())
	ack, err := b.js.PublishMsg(ctx, copyMsg)
	require.NoError(t, err)

	// The leader freezes; a worker meets the copy and, no move naming it,
	// drops it as an orphan after its grace.
	b.startWorker(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, b.bucketEmpty(c, "AX_P2")) }, 60*time.Second, 100*time.Millisecond, "the orphan copy is dropped")

	// The leader wakes and finishes aging's steps.
	_, _, err = b.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Action: "aging"}, func(r *kv.Record) error {
		r.Priority = 2
		r.Bind(rec.Gen+1, ack.Stream, ack.Sequence)
		return nil
	})
	if err == nil {
		require.NoError(t, src.DeleteMsg(ctx, raw.Sequence))
	} else {
		require.ErrorIs(t, err, kv.ErrConflict)
	}
	_, err = b.js.ResumeConsumer(ctx, "AX_P3", consumer)
	require.NoError(t, err)
	b.settled(t, id, 20*time.Second)
	require.Equal(t, 1, b.log.count(id))
}

// A hostile producer publishes, on ax.submit.>, messages naming tasks in
// every state: raw with the victim's id (as its own tenant, type and key,
// and as another tenant's, which is that tenant's own task), with a future
// Ax-Run-At, and with internal headers that name the victim. None runs as
// the victim, none strands or cancels it, and every one is settled (no
// consumer slot or message held for good). Held at 3ebfff8.
func TestHostileProducerCannotTouchTasksInAnyState(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	real := payload(t, identityArgs{})
	evil := `{"sleep_ms":3}`
	victims := map[string]*kv.Record{}
	submit := func(id string, args identityArgs, delay time.Duration) {
		b.submit(t, ax.TaskSpec{ID: id, Key: id, Priority: ax.P3, Payload: payload(t, args), Delay: delay})
		victims[id] = b.get(t, id)
	}
	attack := func(id string) {
		rec := victims[id]
		runAt := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
		msgs := []*nats.Msg{
			hostile("ax.submit.p0."+rec.Tenant+".ident."+rec.Key, evil, streams.HeaderMsgID, id),
			hostile("ax.submit.p4."+rec.Tenant+".ident."+rec.Key, evil, streams.HeaderMsgID, id, streams.HeaderRunAt, runAt),
			hostile("ax.submit.p1.other.ident."+rec.Key, evil, streams.HeaderMsgID, id),
			hostile("ax.submit.p1.other.ident.x", evil, streams.HeaderMsgID, id, streams.HeaderRunAt, runAt),
			hostile("ax.submit.p0."+rec.Tenant+".ident."+rec.Key, evil, streams.HeaderMsgID, "atk-"+id,
				streams.HeaderTaskID, id, streams.HeaderGen, "99", streams.HeaderReleasedAt, runAt),
		}
		for _, msg := range msgs {
			_, err := b.js.PublishMsg(ctx, msg)
			require.NoError(t, err)
		}
	}
	// Before any worker runs: PENDING, READY, PAUSED, CANCELLED.
	submit("h-pending", identityArgs{}, 3*time.Second)
	submit("h-ready", identityArgs{}, 0)
	submit("h-paused", identityArgs{}, 0)
	require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: "h-paused"}, nil))
	submit("h-cancelled", identityArgs{}, 0)
	require.NoError(t, b.call(admin.VerbTaskCancel, admin.TaskRequest{ID: "h-cancelled"}, nil))
	require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: "h-unseen", Tenant: ax.DefaultTenant, Unseen: true}, nil))
	for _, id := range []string{"h-pending", "h-ready", "h-paused", "h-cancelled"} {
		attack(id)
	}
	b.startWorker(t)
	// With a worker: RUNNING, RETRYING, DEAD.
	submit("h-running", identityArgs{SleepMS: 3000}, 0)
	submit("h-retrying", identityArgs{FailAttempt: 1, RetryMS: 3000}, 0)
	submit("h-dead", identityArgs{FailAttempt: 1, Permanent: true}, 0)
	b.waitState(t, "h-running", 10*time.Second, kv.StateRunning)
	b.waitState(t, "h-retrying", 10*time.Second, kv.StateRetrying)
	b.waitState(t, "h-dead", 10*time.Second, kv.StateDead)
	for _, id := range []string{"h-running", "h-retrying", "h-dead"} {
		attack(id)
	}
	require.NoError(t, b.call(admin.VerbTaskResume, admin.TaskRequest{ID: "h-paused", Tenant: ax.DefaultTenant}, nil))

	want := map[string]kv.State{"h-pending": kv.StateSucceeded, "h-ready": kv.StateSucceeded, "h-paused": kv.StateSucceeded,
		"h-cancelled": kv.StateCancelled, "h-running": kv.StateSucceeded, "h-retrying": kv.StateSucceeded, "h-dead": kv.StateDead}
	for id, state := range want {
		rec := b.settled(t, id, 30*time.Second)
		require.Equal(t, state, rec.State, "%s: trail %s", id, trailOf(rec))
		require.Equal(t, victims[id].Tenant, rec.Tenant, id)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"AX_P0", "AX_P1", "AX_P2", "AX_P3", "AX_P4"} {
			assert.True(c, b.bucketEmpty(c, name), name)
		}
	}, 60*time.Second, 100*time.Millisecond, "every hostile message is settled")
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	for id := range want {
		for _, p := range b.log.payloads[id] {
			require.Equal(t, string(real) == p || id == "h-running" || id == "h-retrying" || id == "h-dead", true, "%s ran %q", id, p)
			require.NotEqual(t, evil, p, "%s ran the hostile payload", id)
		}
	}
	require.Zero(t, b.log.runs["h-cancelled"])
	require.Equal(t, 1, b.log.runs["h-dead"])
	require.Equal(t, 1, b.log.runs["h-running"])
	require.Equal(t, 2, b.log.runs["h-retrying"])
	require.Zero(t, b.log.overlaps)
	rec := b.get(t, "h-unseen")
	require.Equal(t, kv.StatePaused, rec.State, "an id paused unseen stays held")
}

// hostile builds a producer's message with header name/value pairs.
func hostile(subject, data string, headers ...string) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = []byte(data)
	for i := 0; i+1 < len(headers); i += 2 {
		msg.Header.Set(headers[i], headers[i+1])
	}
	return msg
}

// A delayed task reprioritized while the mover releases it runs at its new
// priority. The mover read the PENDING record before the reprioritize and
// published its released copy to the old bucket; its compare-and-set then
// loses, and it publishes again at the new priority. The test does the
// mover's first release by hand.
//
// Fails at 93241b2: a worker adopts the first released copy (the PENDING
// adoption rule ignores its bucket): the task runs from P3 while its record
// says P1, and the operator's reprioritize is silently lost.
func TestReleasedCopyFromBeforeReprioritizeIsNotAdopted(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	names := streams.DefaultNames()
	id := b.submit(t, ax.TaskSpec{ID: "repri-release", Priority: ax.P3, Payload: payload(t, identityArgs{}), Delay: 2 * time.Second})
	rec, rev, err := storeGet(ctx, b.store, id)
	require.NoError(t, err)
	// The mover: read (above), publish the released copy at the record's priority.
	released := streams.TaskCopy(names.CopySubject(rec.Priority, rec.Tenant, rec.Type, rec.Key), payload(t, identityArgs{}), nats.Header{}, id, rec.Gen+1, nuid.Next())
	released.Header.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano))
	ack, err := b.js.PublishMsg(ctx, released)
	require.NoError(t, err)
	// The operator reprioritizes the PENDING task meanwhile.
	require.NoError(t, b.call(admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: 1}, nil))
	// The mover's compare-and-set loses; it will release again (its schedule stays).
	_, _, err = b.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Action: "due"}, func(r *kv.Record) error {
		r.Bind(rec.Gen+1, ack.Stream, ack.Sequence)
		return nil
	})
	require.ErrorIs(t, err, kv.ErrConflict)
	b.startWorker(t)
	done := b.waitState(t, id, 20*time.Second, kv.StateSucceeded)
	require.Equal(t, 1, b.log.count(id))
	require.Equal(t, 1, done.Priority)
	require.Equal(t, "AX_P1", done.Stream, "the task ran from the bucket of its priority; trail %s", trailOf(done))
}

// handMove does a control-plane move by hand, as aging, the mover, resume,
// reprioritize and replay do: publish a copy of the task's current message
// (or of src, a dead letter) to priority, then, if cas, the compare-and-set
// to state to that names it. It never deletes the old message: a cas is an
// ambiguous write that landed (its reply lost, the mover gave up), no cas a
// mover that died after its publish.
func (b *meshBundle) handMove(t *testing.T, id string, priority int, to kv.State, cas, released bool, src *jetstream.RawStreamMsg) {
	t.Helper()
	ctx := context.Background()
	rec, rev, err := storeGet(ctx, b.store, id)
	require.NoError(t, err)
	if src == nil {
		stream, err := b.js.Stream(ctx, rec.Stream)
		require.NoError(t, err)
		src, err = stream.GetMsg(ctx, rec.StreamSeq)
		require.NoError(t, err)
	}
	names := streams.DefaultNames()
	msg := streams.TaskCopy(names.CopySubject(priority, rec.Tenant, rec.Type, rec.Key), src.Data, src.Header, id, rec.Gen+1, nuid.Next(), streams.HeaderError)
	if released {
		msg.Header.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano))
	}
	ack, err := b.js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	if !cas {
		return
	}
	_, _, err = b.store.Apply(ctx, rec, rev, to, kv.Actor{Action: "hand"}, func(r *kv.Record) error {
		r.Priority = priority
		r.Bind(rec.Gen+1, ack.Stream, ack.Sequence)
		if rec.State == kv.StateDead {
			r.Attempt, r.DLQSeq, r.FinishedAt = 0, 0, nil
		}
		return nil
	})
	require.NoError(t, err)
}

// Every mover's two crash points: its compare-and-set landed but it never
// deleted the old message (an ambiguous write), or it died after its
// publish (an orphan copy). Each task runs once from the message its
// record names, and every copy is settled. Held at 90cbd4b.
func TestMovesInterruptedAtEveryStepRunOnce(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	ok := payload(t, identityArgs{})
	for _, id := range []string{"amb-repri", "orph-repri", "amb-resume", "orph-resume"} {
		b.submit(t, ax.TaskSpec{ID: id, Priority: ax.P3, Payload: ok})
	}
	b.submit(t, ax.TaskSpec{ID: "orph-release", Priority: ax.P3, Payload: ok, Delay: 2 * time.Second})
	b.handMove(t, "amb-repri", 1, kv.StateReady, true, false, nil)
	b.handMove(t, "orph-repri", 1, kv.StateReady, false, false, nil)
	for _, id := range []string{"amb-resume", "orph-resume"} {
		require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: id}, nil))
	}
	b.handMove(t, "amb-resume", 3, kv.StateReady, true, false, nil)
	b.handMove(t, "orph-resume", 3, kv.StateReady, false, false, nil)
	schedule := &jetstream.RawStreamMsg{Data: ok, Header: nats.Header{}}
	b.handMove(t, "orph-release", 3, kv.StatePending, false, true, schedule)

	b.startWorker(t)
	dead := payload(t, identityArgs{FailAttempt: 1, Permanent: true})
	for _, id := range []string{"amb-replay", "orph-replay"} {
		b.submit(t, ax.TaskSpec{ID: id, Priority: ax.P3, Payload: dead})
		b.waitState(t, id, 20*time.Second, kv.StateDead)
	}
	dlq, err := b.js.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	for _, id := range []string{"amb-replay", "orph-replay"} {
		letter, err := dlq.GetMsg(ctx, b.get(t, id).DLQSeq)
		require.NoError(t, err)
		b.handMove(t, id, 3, kv.StateReady, id == "amb-replay", false, letter)
	}

	want := map[string]int{"amb-repri": 1, "orph-repri": 1, "amb-resume": 1, "orph-resume": 1, "orph-release": 1, "amb-replay": 2, "orph-replay": 1}
	for id, runs := range want {
		rec := b.settled(t, id, 30*time.Second)
		require.Equal(t, runs, b.log.count(id), "%s: trail %s", id, trailOf(rec))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"AX_P0", "AX_P1", "AX_P2", "AX_P3", "AX_P4"} {
			assert.True(c, b.bucketEmpty(c, name), name)
		}
	}, 60*time.Second, 100*time.Millisecond, "every copy is settled")
	for id := range want {
		require.True(t, b.get(t, id).State.Terminal(), id)
	}
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	require.Zero(t, b.log.overlaps)
}

// Every mover at once on the same tasks: aging (every 200 ms), operators
// pausing, resuming, reprioritizing and cancelling at random, and a worker
// claiming, for 10 s. Every task ends SUCCEEDED or CANCELLED (none READY,
// PENDING, PAUSED or RUNNING), a SUCCEEDED task ran exactly once, a
// CANCELLED one at most once, no two runs overlap, and every bucket drains.
func TestMoversRacingOnTheSameTasks(t *testing.T) {
	t.Parallel()
	b := setupMeshAging(t, kv.StoreConfig{}, 200*time.Millisecond)
	const n = 120
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("race-%03d", i)
		var delay time.Duration
		if i%4 == 0 {
			delay = time.Duration(500+i*20) * time.Millisecond
		}
		b.submit(t, ax.TaskSpec{ID: ids[i], Priority: ax.PriorityOf(3 + i%2), Payload: payload(t, identityArgs{SleepMS: 600}), Delay: delay})
	}
	b.startWorker(t)
	stop := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(stop) {
				id := ids[rng.IntN(n)]
				switch r := rng.IntN(20); {
				case r < 6:
					_ = b.call(admin.VerbTaskPause, admin.TaskRequest{ID: id}, nil)
				case r < 13:
					_ = b.call(admin.VerbTaskResume, admin.TaskRequest{ID: id}, nil)
				case r < 19:
					_ = b.call(admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: rng.IntN(5)}, nil)
				default:
					_ = b.call(admin.VerbTaskCancel, admin.TaskRequest{ID: id}, nil)
				}
			}
		})
	}
	wg.Wait()
	counts := map[kv.State]int{}
	for _, id := range ids {
		rec := b.settled(t, id, 60*time.Second)
		counts[rec.State]++
		runs := b.log.count(id)
		switch rec.State {
		case kv.StateSucceeded:
			require.Equal(t, 1, runs, "%s: trail %s", id, trailOf(rec))
		case kv.StateCancelled:
			require.LessOrEqual(t, runs, 1, "%s: trail %s", id, trailOf(rec))
		default:
			t.Fatalf("%s ended %s: trail %s", id, rec.State, trailOf(rec))
		}
	}
	t.Logf("outcomes: %v", counts)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"AX_P0", "AX_P1", "AX_P2", "AX_P3", "AX_P4"} {
			assert.True(c, b.bucketEmpty(c, name), name)
		}
	}, 60*time.Second, 100*time.Millisecond, "every message is settled")
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	require.Zero(t, b.log.overlaps)
}

// An id an operator paused for a tenant before any message named it is
// held for that tenant's task: another tenant's producer who learnt the id
// publishes it raw, and that is a task of its own tenant (a task id
// belongs to its tenant), which runs at once and binds nothing; the
// owner's submit through the Go client is accepted (not a duplicate),
// binds the held record, and runs once on resume.
//
// Failed at 2a2bf35: a held record bound no message, so after the resume
// deleted it the first message redelivered won: the client reported the
// owner's task accepted (not a duplicate), yet the raw one ran as tenant
// "evil" and the accepted task was dropped as foreign. At 9b723bb (ids
// global) the raw message of "evil" bound the owner's held id.
func TestPausedUnseenIDKeepsTheAcceptedTask(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	b.startWorker(t)
	require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: "held2", Tenant: "owner", Unseen: true}, nil))
	_, err := b.js.PublishMsg(ctx, hostile("ax.submit.p0.evil.ident.x", `{"sleep_ms":3}`, streams.HeaderMsgID, "held2"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec, _, err := b.store.Get(ctx, kv.Ref{Tenant: "evil", ID: "held2"})
		return err == nil && rec.State == kv.StateSucceeded
	}, 20*time.Second, 20*time.Millisecond, "evil's message is evil's own task")
	real := payload(t, identityArgs{})
	info, err := b.client.Submit(ctx, ax.TaskSpec{ID: "held2", Type: "ident", Tenant: "owner", Priority: ax.P3, Payload: real})
	require.NoError(t, err)
	require.False(t, info.Duplicate, "the owner's submit is the task its id was held for")
	require.NoError(t, b.call(admin.VerbTaskResume, admin.TaskRequest{ID: "held2", Tenant: "owner"}, nil))
	var rec *kv.Record
	require.Eventually(t, func() bool {
		var err error
		rec, _, err = b.store.Get(ctx, kv.Ref{Tenant: "owner", ID: "held2"})
		return err == nil && rec.State == kv.StateSucceeded
	}, 30*time.Second, 20*time.Millisecond)
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	require.Equal(t, []string{string(real)}, b.log.payloads["owner/held2"], "trail %s", trailOf(rec))
	require.Equal(t, []string{`{"sleep_ms":3}`}, b.log.payloads["evil/held2"])
}
