package scheduler

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// tracked is one non-terminal task record the reconciler watches.
type tracked struct {
	ref   kv.Ref    // the task its record key names
	key   string    // the record's key
	rev   uint64    // revision last seen by the watch
	state kv.State  // state at rev
	since time.Time // when this revision was seen (the local clock)
	due   time.Time // next check
	// healthy counts the checks in a row that found the task fine: each
	// doubles the wait before the next one, up to the recheck bound.
	healthy int
	pos     int // position in the heap
}

// recordIndex keeps the non-terminal task records (PENDING, READY,
// RUNNING, RETRYING) fed by a watch of the task bucket, ordered by when
// each is next due for a check: a pass pops only the due ones, so its cost
// does not grow with the number of records. It is used by one goroutine.
type recordIndex struct {
	byKey map[string]*tracked // by record key
	order dueOrder
	grace time.Duration
}

func newRecordIndex(grace time.Duration) *recordIndex {
	return &recordIndex{byKey: map[string]*tracked{}, grace: grace}
}

// observe applies one watched entry, seen at now. A key that names no task
// ([kv.ErrForeignKey]) is not tracked.
func (x *recordIndex) observe(entry jetstream.KeyValueEntry, now time.Time) {
	key := entry.Key()
	ref, err := kv.ParseKey(key)
	if err != nil {
		return
	}
	state := kv.State("")
	if entry.Operation() == jetstream.KeyValuePut {
		state = recordState(entry.Value())
	}
	t := x.byKey[key]
	if !watched(state) {
		if t != nil {
			if t.pos >= 0 {
				heap.Remove(&x.order, t.pos)
			}
			delete(x.byKey, key)
		}
		return
	}
	if t == nil {
		t = &tracked{ref: ref, key: key}
		x.byKey[key] = t
		t.rev, t.state, t.since, t.due = entry.Revision(), state, now, now.Add(x.grace)
		heap.Push(&x.order, t)
		return
	}
	if entry.Revision() <= t.rev {
		return
	}
	t.rev, t.state, t.since, t.due, t.healthy = entry.Revision(), state, now, now.Add(x.grace), 0
	if t.pos >= 0 {
		heap.Fix(&x.order, t.pos)
	} else {
		heap.Push(&x.order, t) // popped for a check: due again from its new revision
	}
}

// watched reports whether a record in state s can be lost by the mesh:
// terminal records have nothing left to run, and a PAUSED one waits for an
// operator.
func watched(s kv.State) bool {
	return s == kv.StatePending || s == kv.StateReady || s == kv.StateRunning || s == kv.StateRetrying
}

// popDue removes and returns up to n records due at now, earliest first.
func (x *recordIndex) popDue(now time.Time, n int) []*tracked {
	var out []*tracked
	for len(out) < n && len(x.order) > 0 && !x.order[0].due.After(now) {
		out = append(out, heap.Pop(&x.order).(*tracked))
	}
	return out
}

// requeue puts a checked record back, due again at due, unless the watch
// replaced or dropped it meanwhile.
func (x *recordIndex) requeue(t *tracked, due time.Time) {
	if x.byKey[t.key] != t || t.pos >= 0 {
		return
	}
	t.due = due
	heap.Push(&x.order, t)
}

// len returns how many records are tracked.
func (x *recordIndex) len() int { return len(x.byKey) }

// stateKey is how a record's state starts in its JSON. The state is the
// sixth field of a record, after id, type, tenant, key and priority, whose
// values are tokens without quotes, so its first occurrence is the state.
var stateKey = []byte(`"state":"`)

// recordState reads a record's state without decoding the whole record
// (its trail is most of it), falling back to a full decode.
func recordState(data []byte) kv.State {
	if i := bytes.Index(data, stateKey); i >= 0 {
		rest := data[i+len(stateKey):]
		if j := bytes.IndexByte(rest, '"'); j > 0 {
			if s := kv.State(rest[:j]); s.Valid() {
				return s
			}
		}
	}
	var rec struct {
		State kv.State `json:"state"`
	}
	if json.Unmarshal(data, &rec) != nil {
		return ""
	}
	return rec.State
}

// dueOrder is a min-heap of tracked records by due time.
type dueOrder []*tracked

func (h dueOrder) Len() int           { return len(h) }
func (h dueOrder) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueOrder) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *dueOrder) Push(x any) {
	t := x.(*tracked)
	t.pos = len(*h)
	*h = append(*h, t)
}
func (h *dueOrder) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.pos = -1
	*h = old[:n-1]
	return t
}
