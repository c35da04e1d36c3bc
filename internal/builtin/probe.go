package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ProbeArgs is the payload of the "probe" type.
type ProbeArgs struct {
	MS        int  `json:"ms"`                  // how long the execution lasts, in milliseconds
	Fail      int  `json:"fail,omitempty"`      // fail this many first attempts, before the effect
	Permanent bool `json:"permanent,omitempty"` // those failures are permanent (dead-letter at once)
}

// ProbeEvent is one line of a probe journal.
type ProbeEvent struct {
	// Event is "start"; "effect", written right before the execution
	// attempts its side effect (once [worker.Task.Held] said the execution
	// still holds its task); then one end: "finish" (the effect is applied
	// or was already there), "error" (an injected failure before the
	// effect, or the effect's write failed) or "abort" (its context ended,
	// or it no longer held its task, before the effect).
	Event    string `json:"ev"`
	Task     string `json:"task"`
	Type     string `json:"type,omitempty"` // the task's type, when the probe is registered under other names
	Worker   string `json:"worker"`
	Exec     uint64 `json:"exec"` // the execution's number in this probe: with the journal, it names one execution
	Attempt  int    `json:"attempt"`
	Delivery uint64 `json:"delivery"` // the message's delivery count
	// Revision is the record revision of the execution's claim, from its
	// [worker.Fence]: it orders the executions of a task.
	Revision uint64 `json:"rev,omitempty"`
	Error    string `json:"error,omitempty"`
	At       int64  `json:"at"` // unix nanoseconds
}

// Probe is the "probe" task type of the fault suites: it journals every
// execution's start, its attempt at its side effect and its end (see
// [ProbeEvent]) to an append-only file (one JSON line per event, written
// straight to the kernel, so a SIGKILL loses nothing written before it),
// sleeps, and applies its side effect by creating the task's key in an
// effects bucket (create-if-absent: the business-key layer of
// idempotency). The bucket hides a second effect; the journal's "effect"
// lines, one per attempt, do not.
type Probe struct {
	mu      sync.Mutex
	journal *os.File
	effects jetstream.KeyValue
	execs   atomic.Uint64
}

// NewProbe opens (appending) the journal at path and binds the effects
// bucket, creating it (one replica) if it does not exist.
func NewProbe(ctx context.Context, js jetstream.JetStream, path, bucket string) (*Probe, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("probe journal: %w", err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, bucket)
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("probe effects bucket %s: %w", bucket, err)
	}
	return &Probe{journal: f, effects: kv}, nil
}

// Register adds the "probe" type to reg, or the probe under each of types
// instead when some are given (the pools tests' "email" and "resize").
func (p *Probe) Register(reg *worker.Registry, types ...string) error {
	if len(types) == 0 {
		types = []string{"probe"}
	}
	for _, t := range types {
		if err := worker.HandleJSON(reg, t, p.handle, nil); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the journal.
func (p *Probe) Close() error { return p.journal.Close() }

func (p *Probe) handle(ctx context.Context, task *worker.Task, args ProbeArgs) error {
	exec := p.execs.Add(1)
	p.write(ProbeEvent{Event: "start"}, task, exec)
	if args.MS > 0 {
		t := time.NewTimer(time.Duration(args.MS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			p.write(ProbeEvent{Event: "abort"}, task, exec) // the execution ends here, without its effect
			return context.Cause(ctx)
		}
	}
	if task.Attempt <= args.Fail {
		err := fmt.Errorf("probe: attempt %d of %d planned failures: %w", task.Attempt, args.Fail, ErrInjected)
		p.write(ProbeEvent{Event: "error", Error: err.Error()}, task, exec)
		if args.Permanent {
			return worker.Permanent(err)
		}
		return err
	}
	if !task.Held() {
		// The claim lapsed (or the context ended) while it slept: a stale
		// execution, so no effect.
		p.write(ProbeEvent{Event: "abort"}, task, exec)
		if err := context.Cause(ctx); err != nil {
			return err
		}
		return worker.ErrClaimLapsed
	}
	p.write(ProbeEvent{Event: "effect"}, task, exec) // an attempt, journaled before it is made
	value, _ := json.Marshal(ProbeEvent{Event: "effect", Task: task.ID, Worker: task.Worker, Exec: exec, Attempt: task.Attempt,
		Delivery: task.Fence().Delivery, At: time.Now().UnixNano()})
	if _, err := p.effects.Create(ctx, task.ID, value); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		err = fmt.Errorf("probe effect: %w", err)
		p.write(ProbeEvent{Event: "error", Error: err.Error()}, task, exec)
		return err
	}
	p.write(ProbeEvent{Event: "finish"}, task, exec)
	return nil
}

// write journals ev about execution exec of task.
func (p *Probe) write(ev ProbeEvent, task *worker.Task, exec uint64) {
	ev.Task, ev.Type, ev.Worker, ev.Exec, ev.Attempt, ev.Delivery, ev.At = task.ID, task.Type, task.Worker, exec, task.Attempt, task.Fence().Delivery, time.Now().UnixNano()
	ev.Revision = task.Fence().Revision
	line, _ := json.Marshal(ev)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.journal.Write(append(line, '\n'))
}
