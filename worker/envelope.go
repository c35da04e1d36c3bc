package worker

import (
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// envelope is what a message says about its task.
type envelope struct {
	id        string
	ref       kv.Ref // the task: the message's tenant and id
	key       string // ref.Key(), made once
	stored    streams.Stored
	opts      streams.Options
	bad       error // why the message breaks the contract; nil if it does not
	handler   handler
	unhandled bool      // no handler is registered for the type: the task is put back ([runner.decline])
	stream    string    // the bucket stream it was delivered from
	seq       uint64    // stream sequence
	published time.Time // when the message was stored
	delivered uint64    // delivery count
	released  bool      // a copy the leader released from AX_DELAYED
	// recorded is a producer's hint (its Ax-Gen header, which the Go client
	// sets) that the task's record was written at submit: the claim reads
	// it first instead of trying to create it. Only the order of the two
	// reads depends on it, never what the claim decides.
	recorded bool
	// release is the note of a workflow task's release (Ax-Release), for
	// the first move of the record its claim creates.
	release string
	trace   *taskTrace // the delivery's spans; nil when tracing is off
	traceID string     // the trace the message's traceparent names, for the logs; "" if none
}

// logID is the log field naming the task, and its trace when the message
// carries one (task_id, trace_id).
func (e *envelope) logID() zap.Field { return zap.Inline(taskLog{id: e.id, traceID: e.traceID}) }

// taskLog writes a task's log fields.
type taskLog struct{ id, traceID string }

func (t taskLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("task_id", t.id)
	if t.traceID != "" {
		enc.AddString("trace_id", t.traceID)
	}
	return nil
}

// parse reads a message's subject and headers. A malformed message still
// yields an id and best-effort fields, so that it can be dead-lettered.
func (cl *claimer) parse(d *delivery, meta *jetstream.MsgMetadata) *envelope {
	env := &envelope{stream: meta.Stream, seq: meta.Sequence.Stream, delivered: meta.NumDelivered, published: meta.Timestamp.UTC()}
	stored, err := cl.cfg.Names.ParseStored(d.msg.Subject())
	if err != nil {
		env.bad = fmt.Errorf("%w: %w", ErrMalformed, err)
		stored = streams.SalvageStored(d.msg.Subject(), d.priority)
	}
	env.stored = stored
	parse := streams.ParseHeaders // a producer's message: internal headers are ignored
	if stored.Copy {
		parse = streams.ParseCopyHeaders
	}
	opts, err := parse(d.msg.Headers())
	if err == nil {
		err = streams.CheckBounds(opts, env.published, cl.cfg.MaxTimeout, cl.cfg.MaxDelay)
	}
	if err != nil && env.bad == nil {
		env.bad = fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	env.opts = opts
	env.id = opts.ID
	env.released = stored.Copy && d.msg.Headers().Get(streams.HeaderReleasedAt) != ""
	env.traceID = streams.TraceID(d.msg.Headers())
	env.recorded = !stored.Copy && d.msg.Headers().Get(streams.HeaderGen) != ""
	env.release = d.msg.Headers().Get(streams.HeaderRelease)
	if env.id == "" {
		env.id = streams.FallbackID(meta.Stream, meta.Sequence.Stream, meta.Timestamp) // no Nats-Msg-Id
	}
	env.ref = kv.Ref{Tenant: stored.Tenant, ID: env.id} // a task id belongs to its tenant
	env.key = env.ref.Key()
	h, ok := cl.cfg.Registry.lookup(stored.Type)
	env.handler, env.unhandled = h, !ok
	return env
}
