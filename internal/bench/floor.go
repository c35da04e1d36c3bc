package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// FloorPlan is the record operations a [Floor] run does per task, beside
// the message, its delivery and its ack.
type FloorPlan struct {
	// Name is the plan's scenario name in results ("floor", "floor-noread", …).
	Name string
	// SubmitRecord creates the READY record at submit, after the
	// message's acknowledgement, as ax's Go client does; the worker reads
	// it before its first write.
	SubmitRecord bool
	// CarryRevision (with SubmitRecord) writes the record first and
	// carries its revision in the message: the worker writes without a
	// read.
	CarryRevision bool
	// Running writes the record RUNNING before the handler (created there
	// without SubmitRecord).
	Running bool
	// Pipelined takes the plan's operations in batches (a batched read,
	// pipelined writes) instead of one synchronous round trip each per
	// handler: the floor of ax's operations in the batched design.
	Pipelined bool
	// AsyncPersist creates the P2 stream and the task bucket in
	// nats-server's async persist mode: a write is acknowledged before it
	// is written to its file, and is lost if the server is killed first.
	AsyncPersist bool
}

// FloorPlans returns the operations of a task recorded at submit one
// synchronous round trip each ("floor"), three designs with fewer, each
// priced by the same run (no claim read; no record at submit, the claim
// creating it as for a raw publish, which is what ax does for a task whose
// id the Go client made: "floor-claimcreate"; only the outcome written), ax's operations on streams that
// acknowledge writes before they are written (async persist mode), and
// ax's operations batched and pipelined ("floor-pipelined"), then the
// three designs with fewer operations batched and pipelined too: the
// floor of each design at its best.
func FloorPlans() []FloorPlan {
	return []FloorPlan{
		{Name: "floor", SubmitRecord: true, Running: true},
		{Name: "floor-noread", SubmitRecord: true, CarryRevision: true, Running: true},
		{Name: "floor-claimcreate", Running: true},
		{Name: "floor-outcome"},
		{Name: "floor-async", SubmitRecord: true, Running: true, AsyncPersist: true},
		{Name: "floor-pipelined", SubmitRecord: true, Running: true, Pipelined: true},
		{Name: "floor-pipelined-noread", SubmitRecord: true, CarryRevision: true, Running: true, Pipelined: true},
		{Name: "floor-pipelined-claimcreate", Running: true, Pipelined: true},
		{Name: "floor-pipelined-outcome", Pipelined: true},
	}
}

// floorPriority is the bucket a floor run uses.
const floorPriority = 2

// Floor runs bare JetStream through the server operations of plan per
// task, with as little client code as it takes: into ax's own P2 stream,
// task bucket and shard consumers (provisioned as ax provisions them),
// messages with a Nats-Msg-Id (keyed by the task id, as a Go submit without
// a key is) and the plan's record creates, in chunks as ax's SubmitBatch
// sends them; then, per delivery, the plan's record read and writes, the
// last with a message TTL as ax's terminal records have, and an ack, by
// o.Concurrency handlers in one process (o.Workers is not used). The
// records are ax's own encodings of a task's READY, RUNNING and SUCCEEDED
// records.
//
// One operation differs from ax's: the pulls. The floor consumes with
// nats.go's Consume and its default batches (few pull requests per task),
// where ax's pullers ask for at most PrefetchPerShard messages at a time
// (0.27 requests per task at 64 slots), so that a worker never holds more
// than it can heartbeat and run soon.
//
// With the first of [FloorPlans] its CPU per task is what ax's operations
// cost before any of ax's code runs: the floor no tuning of ax's client
// can go much below while a task takes these operations.
func Floor(ctx context.Context, o Options, plan FloorPlan) (*Result, error) {
	e, err := newEnv(ctx, o, "axfloor", 0)
	if err != nil {
		return nil, err
	}
	defer e.close()
	ctx, cancel := context.WithCancel(ctx) // ends the handlers' operations on any return
	defer cancel()
	mode := jetstream.DefaultPersistMode
	if plan.AsyncPersist {
		mode = jetstream.AsyncPersistMode
	}
	inMode, err := floorPersistMode(ctx, e, mode)
	if err != nil {
		return nil, err
	}
	bucket, err := e.js.KeyValue(ctx, e.names.TasksBucket())
	if err != nil {
		return nil, err
	}
	stream, err := e.js.Stream(ctx, e.names.PriorityStream(floorPriority))
	if err != nil {
		return nil, err
	}
	ready, running, succeeded, err := floorRecords(e.names.PriorityStream(floorPriority))
	if err != nil {
		return nil, err
	}
	var lat latencies
	var done counter
	var failMu sync.Mutex
	var failed error
	broke := make(chan struct{}) // closed by the first failure
	fail := func(err error) {
		failMu.Lock()
		defer failMu.Unlock()
		if failed == nil {
			failed = err
			close(broke)
		}
	}
	all := make(chan struct{})
	work := make(chan jetstream.Msg, o.Concurrency)
	quit := make(chan struct{}) // ends the handlers, and the callbacks waiting for one
	var wg sync.WaitGroup
	defer func() {
		close(quit)
		wg.Wait()
	}()
	handled := func(msg jetstream.Msg) {
		lat.add(since(msg.Data()))
		if done.n.Add(1) == int64(o.Tasks) {
			close(all)
		}
	}
	var consuming []jetstream.ConsumeContext
	stop := func() {
		for _, cc := range consuming {
			cc.Stop()
		}
		consuming = nil
	}
	defer stop()
	if plan.Pipelined {
		wg.Go(func() {
			if err := floorPipelined(ctx, e, o, stream, plan, running, succeeded, handled, quit); err != nil {
				fail(err)
			}
		})
	} else {
		for range o.Concurrency {
			wg.Go(func() {
				for {
					var msg jetstream.Msg
					select {
					case msg = <-work:
					case <-quit:
						return
					}
					if err := floorTask(ctx, e.js, bucket, plan, msg, running, succeeded); err != nil {
						fail(err)
					}
					handled(msg)
				}
			})
		}
		for shard := range streams.Shards { // ax's own shard consumers
			cons, err := stream.Consumer(ctx, e.names.ConsumerName(floorPriority, shard))
			if err != nil {
				return nil, err
			}
			var opts []jetstream.PullConsumeOpt
			if len(cons.CachedInfo().Config.PriorityGroups) > 0 {
				opts = append(opts, jetstream.PullPriorityGroup(streams.PriorityGroup))
			}
			cc, err := cons.Consume(func(msg jetstream.Msg) {
				select {
				case work <- msg:
				case <-quit:
				}
			}, opts...)
			if err != nil {
				return nil, err
			}
			consuming = append(consuming, cc)
		}
	}
	bar := startProgress(o.Progress, plan.Name, o.Tasks, done.load)
	defer bar.end()
	before, start := e.usage(), time.Now()
	if err := floorSubmit(ctx, e, o, plan, ready); err != nil {
		return nil, err
	}
	submitted := time.Since(start)
	select {
	case <-all:
	case <-broke:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	elapsed := time.Since(start)
	after := e.usage()
	bar.end()
	stop()
	failMu.Lock() // a handler may still run a redelivered message
	err = failed
	failMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	r := &Result{Scenario: plan.Name, Concurrency: o.Concurrency, Workers: 1, Sync: o.Sync,
		Counts: map[string]int64{"async_persist_streams": 0}}
	if mode == jetstream.AsyncPersistMode {
		r.Counts["async_persist_streams"] = int64(inMode)
	}
	measure(r, o.Tasks, elapsed, before, after)
	r.SubmitPerSec = float64(o.Tasks) / submitted.Seconds()
	lat.fill(r)
	return r, nil
}

// floorPersistMode makes the P2 stream (with its shard consumers) and the
// task bucket's stream persist in mode, creating each again as it was
// where it does not (a stream update cannot change the mode; against a
// given server, a stream an earlier async run left behind is made default
// again). It returns how many of the two streams persist in mode, as the
// server says, and fails unless both do.
func floorPersistMode(ctx context.Context, e *env, mode jetstream.PersistModeType) (int, error) {
	inMode := 0
	for _, name := range []string{e.names.PriorityStream(floorPriority), kv.StreamName(e.names.TasksBucket())} {
		stream, err := e.js.Stream(ctx, name)
		if err != nil {
			return inMode, err
		}
		cfg := stream.CachedInfo().Config
		if cfg.PersistMode == mode {
			inMode++
			continue
		}
		var consumers []jetstream.ConsumerConfig
		list := stream.ListConsumers(ctx)
		for info := range list.Info() {
			consumers = append(consumers, info.Config)
		}
		if err := list.Err(); err != nil {
			return inMode, fmt.Errorf("list the consumers of %s: %w", name, err)
		}
		if name == e.names.PriorityStream(floorPriority) && len(consumers) != streams.Shards {
			return inMode, fmt.Errorf("%s has %d consumers, not its %d shard consumers", name, len(consumers), streams.Shards)
		}
		if err := e.js.DeleteStream(ctx, name); err != nil {
			return inMode, err
		}
		cfg.PersistMode = mode
		if stream, err = e.js.CreateStream(ctx, cfg); err != nil {
			return inMode, fmt.Errorf("create %s in persist mode %v: %w", name, mode, err)
		}
		if got := stream.CachedInfo().Config.PersistMode; got != mode {
			return inMode, fmt.Errorf("create %s in persist mode %v: the server made it %v", name, mode, got)
		}
		inMode++
		for _, cc := range consumers {
			if _, err := stream.CreateConsumer(ctx, cc); err != nil {
				return inMode, err
			}
		}
	}
	return inMode, nil
}

// floorRevision is the header of a [FloorPlan.CarryRevision] message.
const floorRevision = "Floor-Revision"

// floorSubmit publishes o.Tasks messages and the plan's record creates in
// chunks, in the order ax's SubmitBatch does: a chunk's messages,
// pipelined, then, once they are acknowledged, its records (with
// [FloorPlan.CarryRevision], the records first, then the messages carrying
// their revisions). Every publish's acknowledgement is checked.
func floorSubmit(ctx context.Context, e *env, o Options, plan FloorPlan, ready []byte) error {
	const chunk = 1_000
	ids := make([]string, 0, chunk)
	revs := make([]uint64, chunk)
	for i := 0; i < o.Tasks; i += chunk {
		ids = ids[:0]
		for range min(chunk, o.Tasks-i) {
			ids = append(ids, nuid.Next()) // the key too, as a task without one has
		}
		creates := func() error {
			return floorPublishAll(ctx, e.js, ids, revs, func(id string) *nats.Msg {
				m := &nats.Msg{Subject: kv.KeySubject(e.names.TasksBucket(), id), Data: ready, Header: nats.Header{}}
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
				return m
			})
		}
		if plan.CarryRevision {
			if err := creates(); err != nil {
				return fmt.Errorf("floor record create: %w", err)
			}
		}
		n := 0
		err := floorPublishAll(ctx, e.js, ids, nil, func(id string) *nats.Msg {
			m := &nats.Msg{Subject: e.names.SubmitSubject(floorPriority, "floor", "noop", id), Data: stamp(make([]byte, o.Payload)), Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, id)
			if plan.CarryRevision {
				m.Header.Set(floorRevision, strconv.FormatUint(revs[n], 10))
			}
			n++
			return m
		})
		if err != nil {
			return fmt.Errorf("floor publish: %w", err)
		}
		if plan.SubmitRecord && !plan.CarryRevision {
			if err := creates(); err != nil {
				return fmt.Errorf("floor record create: %w", err)
			}
		}
	}
	return nil
}

// floorPublishAll publishes the message of each id, pipelined, and waits
// for every acknowledgement; with seqs, it stores each one's sequence there.
func floorPublishAll(ctx context.Context, js jetstream.JetStream, ids []string, seqs []uint64, msg func(id string) *nats.Msg) error {
	futures := make([]jetstream.PubAckFuture, 0, len(ids))
	for _, id := range ids {
		f, err := floorPublish(ctx, js, msg(id))
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for n, f := range futures {
		select {
		case ack := <-f.Ok():
			if seqs != nil {
				seqs[n] = ack.Sequence
			}
		case err := <-f.Err():
			return fmt.Errorf("%s: %w", ids[n], err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// floorTask is a task's worker side in [Floor]: the plan's record read and
// writes, then the ack.
func floorTask(ctx context.Context, js jetstream.JetStream, bucket jetstream.KeyValue, plan FloorPlan, msg jetstream.Msg, running, succeeded []byte) error {
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	var rev uint64 // 0: the next write creates the record
	switch {
	case plan.CarryRevision:
		var err error
		if rev, err = strconv.ParseUint(msg.Headers().Get(floorRevision), 10, 64); err != nil {
			return fmt.Errorf("revision of %s: %w", id, err)
		}
	case plan.SubmitRecord:
		entry, err := bucket.Get(ctx, id)
		for range 1_000 {
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			}
			select { // the create follows its chunk's messages
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			entry, err = bucket.Get(ctx, id)
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", id, err)
		}
		rev = entry.Revision()
	}
	if plan.Running {
		var err error
		if rev, err = bucket.Update(ctx, id, running, rev); err != nil { // revision 0 creates
			return fmt.Errorf("write RUNNING %s: %w", id, err)
		}
	}
	// A terminal record expires (ax writes it with a message TTL).
	if _, err := js.Publish(ctx, kv.KeySubject(bucket.Bucket(), id), succeeded,
		jetstream.WithMsgTTL(kv.DefaultRetention), jetstream.WithExpectLastSequencePerSubject(rev)); err != nil {
		return fmt.Errorf("write SUCCEEDED %s: %w", id, err)
	}
	return msg.Ack()
}

// floorPublish publishes m asynchronously, waiting while the publish
// window is full.
func floorPublish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (jetstream.PubAckFuture, error) {
	for {
		f, err := js.PublishMsgAsync(m)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// floorRecords are ax's encodings of one task's READY, RUNNING and
// SUCCEEDED records, each with its trail so far, as a worker writes them,
// for a task stored in stream.
func floorRecords(stream string) (ready, running, succeeded []byte, err error) {
	now := time.Now().UTC()
	id := nuid.Next()
	r := &kv.Record{
		ID: id, Type: "noop", Tenant: "floor", Key: "k", Priority: floorPriority, State: kv.StateReady,
		MaxAttempts: 3, Timeout: kv.Duration(30 * time.Second), CreatedAt: now, UpdatedAt: now,
		Trail: []kv.Move{{Task: id, To: kv.StateReady, At: now, Action: "submit"}},
	}
	r.Bind(1, stream, 123456)
	if ready, err = r.MarshalJSON(); err != nil {
		return nil, nil, nil, err
	}
	r.State, r.Attempt, r.Worker, r.Delivery, r.StartedAt = kv.StateRunning, 1, "bench-host-"+nuid.Next()[14:], 1, &now
	r.Trail = append(r.Trail, kv.Move{Task: id, From: kv.StateReady, To: kv.StateRunning, At: now, Worker: r.Worker, Action: "claim", Took: kv.Duration(time.Millisecond)})
	if running, err = r.MarshalJSON(); err != nil {
		return nil, nil, nil, err
	}
	r.State, r.FinishedAt = kv.StateSucceeded, &now
	r.Trail = append(r.Trail, kv.Move{Task: id, From: kv.StateRunning, To: kv.StateSucceeded, At: now, Worker: r.Worker, Action: "complete", Took: kv.Duration(time.Millisecond)})
	if succeeded, err = r.MarshalJSON(); err != nil {
		return nil, nil, nil, err
	}
	return ready, running, succeeded, nil
}
