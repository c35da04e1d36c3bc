package worker

import "fmt"

// Fence identifies one execution of a task, for side effects that must not
// be applied by a stale execution. It is a fencing token: a later claim of
// the task always has a greater Revision, so a downstream store can keep
// the highest fence it has seen per task and refuse a write that carries a
// lower one (see [Fence.Less] and the package example of a conditional
// write).
type Fence struct {
	// Tenant owns the task: two tenants' equal task ids are two tasks.
	Tenant string `json:"tenant"`
	// Task is the task id.
	Task string `json:"task"`
	// Revision is the revision of the task's record written by the claim
	// of this execution (the compare-and-set that moved it to RUNNING).
	// Record revisions only grow, so it orders the executions of a task.
	Revision uint64 `json:"revision"`
	// Delivery is the delivery count of the message this execution runs
	// (informative: it also grows, but only within one message).
	Delivery uint64 `json:"delivery"`
}

// Less reports whether f is an older execution of the task than other: a
// downstream write carrying f must be refused once other was seen. Fences
// of different tasks do not compare (false).
func (f Fence) Less(other Fence) bool {
	return f.Tenant == other.Tenant && f.Task == other.Task && f.Revision < other.Revision
}

// String formats f as "<task>@<revision>/<delivery>".
func (f Fence) String() string { return fmt.Sprintf("%s@%d/%d", f.Task, f.Revision, f.Delivery) }

// Fence returns the fencing token of this execution of the task. Pass it
// with every side effect that a stale execution must not repeat, to a store
// that keeps the highest fence per task and refuses lower ones.
func (t *Task) Fence() Fence { return t.fence }

// Held reports whether this execution still holds its task, checked
// synchronously (no timer, no round trip): false once its claim lapsed (no
// heartbeat answered within five sixths of the ack wait: the message may
// be running elsewhere), once its context ended (timeout, operator cancel,
// worker stop), once the worker lost its membership of the mesh, or once a
// slot of a concurrency limit it runs on was lost (not renewed within its
// TTL, so another task may hold it: [ErrLimitSlotLost]). It
// never turns true again. Call it right before a side effect: a false
// means the effect must not be applied (return the context's cause). A
// true is no promise for later; a freeze between the call and the effect
// is fenced only by a downstream check of [Task.Fence].
func (t *Task) Held() bool {
	if t.held == nil {
		return false
	}
	return t.held()
}
