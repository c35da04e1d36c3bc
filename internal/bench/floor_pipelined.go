package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// DefaultFloorBatch is the most messages one pull of a pipelined floor
// plan brings, unless [Options.FloorBatch] says otherwise.
const DefaultFloorBatch = 256

// floorPipelined is the worker side of a [FloorPlan.Pipelined] run:
// [Options.FloorLoops] loops per shard consumer each pull up to
// [Options.FloorBatch] messages at a time and take them through the
// plan's operations together: one direct get of the batch's records
// (multi_last), their RUNNING writes pipelined (asynchronous
// compare-and-set publishes, every acknowledgement awaited and checked),
// then their SUCCEEDED writes the same way, then the acks.
// Each write is still a compare-and-set of its own record. It returns once
// every loop has ended (quit closed or ctx done), with the first error.
func floorPipelined(ctx context.Context, e *env, o Options, stream jetstream.Stream, plan FloorPlan, running, succeeded []byte,
	handled func(jetstream.Msg), quit <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	batch, loops := cmp.Or(o.FloorBatch, DefaultFloorBatch), max(o.FloorLoops, 1)
	errs := make(chan error, streams.Shards*loops)
	for shard := range streams.Shards {
		cons, err := stream.Consumer(ctx, e.names.ConsumerName(floorPriority, shard))
		if err != nil {
			return err
		}
		var opts []jetstream.FetchOpt
		if len(cons.CachedInfo().Config.PriorityGroups) > 0 {
			opts = append(opts, jetstream.FetchPriorityGroup(streams.PriorityGroup))
		}
		for range loops {
			go func() {
				errs <- floorPipelinedShard(ctx, e, cons, batch, opts, plan, running, succeeded, handled)
			}()
		}
	}
	var first error
	for range streams.Shards * loops {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
			cancel()
		}
	}
	return first
}

func floorPipelinedShard(ctx context.Context, e *env, cons jetstream.Consumer, size int, opts []jetstream.FetchOpt, plan FloorPlan,
	running, succeeded []byte, handled func(jetstream.Msg)) error {
	bucket := e.names.TasksBucket()
	for ctx.Err() == nil {
		// The server ends the request (a context ending it in the client
		// would drop the messages already on their way, to come back only
		// after their ack wait).
		batch, err := cons.Fetch(size, append(opts, jetstream.FetchMaxWait(time.Second))...)
		if err != nil {
			return err
		}
		var msgs []jetstream.Msg
		for msg := range batch.Messages() {
			msgs = append(msgs, msg)
		}
		if len(msgs) == 0 {
			continue
		}
		subjects := make([]string, len(msgs))
		revs := make(map[string]uint64, len(msgs)) // 0: the first write creates the record
		for i, msg := range msgs {
			subjects[i] = kv.KeySubject(bucket, msg.Headers().Get(jetstream.MsgIDHeader))
		}
		switch {
		case plan.CarryRevision:
			for i, msg := range msgs {
				rev, err := strconv.ParseUint(msg.Headers().Get(floorRevision), 10, 64)
				if err != nil {
					return fmt.Errorf("revision of %s: %w", subjects[i], err)
				}
				revs[subjects[i]] = rev
			}
		case plan.SubmitRecord:
			if err := floorReadAll(ctx, e, subjects, revs); err != nil {
				return err
			}
		}
		if plan.Running {
			if err := floorWriteAll(ctx, e.js, subjects, revs, running, 0); err != nil {
				return fmt.Errorf("write RUNNING: %w", err)
			}
		}
		if err := floorWriteAll(ctx, e.js, subjects, revs, succeeded, kv.DefaultRetention); err != nil {
			return fmt.Errorf("write SUCCEEDED: %w", err)
		}
		for _, msg := range msgs {
			if err := msg.Ack(); err != nil {
				return err
			}
			handled(msg)
		}
	}
	return ctx.Err()
}

// floorReadAll reads the last revision of each subject in one batched
// direct get, reading again (after a millisecond) while some record is not
// there yet: its create follows its chunk's messages.
func floorReadAll(ctx context.Context, e *env, subjects []string, revs map[string]uint64) error {
	want := subjects
	for range 1_000 {
		got, err := jetstreamext.GetLastMsgsFor(ctx, e.js, kv.StreamName(e.names.TasksBucket()), want)
		if err != nil {
			return fmt.Errorf("batched read: %w", err)
		}
		for msg, err := range got {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return fmt.Errorf("batched read: %w", err)
			}
			revs[msg.Subject] = msg.Sequence
		}
		var missing []string
		for _, s := range want {
			if revs[s] == 0 {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		want = missing
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("batched read: %d records never written", len(want))
}

// floorWriteAll writes data to each subject as a compare-and-set on its
// revision in revs, pipelined, and stores each new revision there.
func floorWriteAll(ctx context.Context, js jetstream.JetStream, subjects []string, revs map[string]uint64, data []byte, ttl time.Duration) error {
	futures := make([]jetstream.PubAckFuture, len(subjects))
	for i, s := range subjects {
		m := &nats.Msg{Subject: s, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(revs[s], 10))
		if ttl > 0 {
			m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
		}
		f, err := floorPublish(ctx, js, m)
		if err != nil {
			return err
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			revs[subjects[i]] = ack.Sequence
		case err := <-f.Err():
			return fmt.Errorf("%s: %w", subjects[i], err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
