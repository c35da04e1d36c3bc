package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ProbeArgs is the payload of the "probe" type.
type ProbeArgs struct {
	MS int `json:"ms"` // how long the execution lasts, in milliseconds
}

// ProbeEvent is one line of a probe journal. Fields were only ever added,
// so older journals still read.
type ProbeEvent struct {
	// Event is "start"; "attempt", written right before the effect once
	// [worker.Task.Held] said the execution still holds its task (every
	// effect attempt is journaled, applied or not); "effect" (the effect
	// was applied: the key was created); "finish"; or "abort" (the context
	// ended, or Held was false: no effect).
	Event   string `json:"ev"`
	Task    string `json:"task"`
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
	At      int64  `json:"at"` // unix nanoseconds
	// Revision and Delivery are the execution's [worker.Fence]: the record
	// revision of its claim (it orders the executions of a task) and the
	// message's delivery count.
	Revision uint64 `json:"rev,omitempty"`
	Delivery uint64 `json:"delivery,omitempty"`
}

// Probe is the "probe" task type of the fault suites: it journals every
// execution's start and end ("finish", or "abort" when its context ended or
// it no longer held its task), and each effect attempt ("attempt", after
// [worker.Task.Held] and right before the effect, with the execution's
// fence), to an append-only file (one JSON line per
// event, written straight to the kernel, so a SIGKILL loses nothing written
// before it), sleeps, and applies its side effect exactly once per task by
// creating the task's key in an effects bucket (create-if-absent: the
// business-key layer of idempotency).
type Probe struct {
	mu      sync.Mutex
	journal *os.File
	effects jetstream.KeyValue
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

// Register adds the "probe" type to reg.
func (p *Probe) Register(reg *worker.Registry) error {
	return worker.HandleJSON(reg, "probe", p.handle, nil)
}

// Close closes the journal.
func (p *Probe) Close() error { return p.journal.Close() }

func (p *Probe) handle(ctx context.Context, task *worker.Task, args ProbeArgs) error {
	p.write("start", task)
	if args.MS > 0 {
		t := time.NewTimer(time.Duration(args.MS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			p.write("abort", task) // the execution ends here, without its effect
			return context.Cause(ctx)
		}
	}
	if !task.Held() {
		// The claim lapsed (or the context ended) while it slept: a stale
		// execution, so no effect.
		p.write("abort", task)
		if err := context.Cause(ctx); err != nil {
			return err
		}
		return worker.ErrClaimLapsed
	}
	p.write("attempt", task)
	value, _ := json.Marshal(p.event("effect", task))
	if _, err := p.effects.Create(ctx, task.ID, value); err == nil {
		p.write("effect", task)
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("probe effect: %w", err)
	}
	p.write("finish", task)
	return nil
}

func (p *Probe) write(event string, task *worker.Task) {
	line, _ := json.Marshal(p.event(event, task))
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.journal.Write(append(line, '\n'))
}

func (p *Probe) event(event string, task *worker.Task) ProbeEvent {
	f := task.Fence()
	return ProbeEvent{Event: event, Task: task.ID, Worker: task.Worker, Attempt: task.Attempt, At: time.Now().UnixNano(),
		Revision: f.Revision, Delivery: f.Delivery}
}
