package worker

import (
	"container/heap"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// dispatchQueue hands received deliveries to the task slots: the highest
// priority first and, within a priority, the task that has waited longest
// (so a task that aging lifted into a busy level runs before the younger
// tasks there) of the group whose turn it is. The deliveries of a priority
// are grouped by the shard they came from (the partition of the task's
// key), on a fair deployment by tenant (the tenant of the consumers they
// came from), on a pools deployment by task type, and the groups take
// turns, each giving its longest-waiting task: a key (a tenant, a type)
// with a deep backlog gets one start in turn with each other one waiting,
// not all the starts its older tasks would win by age (a tenant or a type
// with a weight W gets up to W starts in its turn). A delivery holds a
// credit of its [puller] until a slot takes it, so the queue holds at most
// PrefetchPerShard deliveries per consumer.
type dispatchQueue struct {
	mu     sync.Mutex
	levels [streams.Priorities]turns // (mu)
	queued int                       // deliveries in levels (mu)
	pushed uint64                    // pushes so far: ties keep arrival order (mu)
	closed bool                      // no more pushes (mu)
	// weights are the groups' shares of a turn, from the mesh's
	// limits (mu).
	weights groupWeights
	wake    chan struct{} // a token: a delivery may be waiting
}

func newDispatchQueue() *dispatchQueue {
	return &dispatchQueue{wake: make(chan struct{}, 1)}
}

// push queues d; it reports false once the queue is closed.
func (q *dispatchQueue) push(d *delivery) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.pushed++
	d.order = q.pushed
	q.levels[d.priority].push(d)
	q.queued++
	q.mu.Unlock()
	q.signal()
	return true
}

func (q *dispatchQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// groupWeights are the weights of the tenants and of the task types (1 if
// absent), which are the dispatch groups of fair and pools deployments.
type groupWeights struct {
	tenants map[string]int
	types   map[string]int
}

// of returns the weight of the group of set (nil: the catch-all group).
func (g groupWeights) of(set *shardSet) int {
	switch {
	case set == nil:
		return 1
	case set.tenant != "":
		return max(g.tenants[set.tenant], 1)
	}
	return max(g.types[set.typ], 1)
}

// setWeights replaces the groups' weights (zero: every group weighs 1).
func (q *dispatchQueue) setWeights(weights groupWeights) {
	q.mu.Lock()
	q.weights = weights
	q.mu.Unlock()
}

// pop takes the next delivery, waiting for one, or returns nil once stop is
// closed. Taking a delivery gives its puller a credit back.
func (q *dispatchQueue) pop(stop <-chan struct{}) *delivery {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if d := q.take(); d != nil {
			return d
		}
		select {
		case <-stop:
			return nil
		case <-q.wake:
		}
	}
}

func (q *dispatchQueue) take() *delivery {
	q.mu.Lock()
	for p := range q.levels {
		d := q.levels[p].pop(q.weights)
		if d == nil {
			continue
		}
		q.queued--
		more := q.queued > 0
		q.mu.Unlock()
		if d.from != nil {
			d.from.give(1) // its puller may ask for another
		}
		if more {
			q.signal() // another idle slot may take the next one
		}
		return d
	}
	q.mu.Unlock()
	return nil
}

// close refuses further pushes and returns the deliveries no slot took.
func (q *dispatchQueue) close() []*delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	var left []*delivery
	for p := range q.levels {
		for _, h := range q.levels[p].groups {
			left = append(left, *h...)
		}
		left = append(left, q.levels[p].first...)
		q.levels[p] = turns{}
	}
	q.queued = 0
	return left
}

// waitingSince is when the task of msg began to wait: the time aging
// carried over from its first copy (honoured only on a control-plane copy,
// whose subject ends in ".ctl": a producer cannot jump the queue; aged
// reports it), else when the stream stored the message (meta, nil if
// unreadable), else now.
func waitingSince(msg jetstream.Msg, meta *jetstream.MsgMetadata, now time.Time) (since time.Time, aged bool) {
	if v := msg.Headers().Get(streams.HeaderWaitingSince); v != "" && strings.HasSuffix(msg.Subject(), ".ctl") {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t, true
		}
	}
	if meta != nil {
		return meta.Timestamp, false
	}
	return now, false
}

// dispatchGroup names a group of deliveries that take turns: the shard of
// the catch-all consumers (set nil or neither a tenant's nor a type's), or
// the set of a tenant's or a type's consumers (shard -1).
type dispatchGroup struct {
	set   *shardSet
	shard int
}

// groupOf returns the dispatch group of d.
func groupOf(d *delivery) dispatchGroup {
	if d.set != nil && (d.set.tenant != "" || d.set.typ != "") {
		return dispatchGroup{set: d.set, shard: -1}
	}
	return dispatchGroup{set: d.set, shard: d.shard}
}

// turns holds one priority's deliveries in groups (see [dispatchGroup]),
// which take turns: pop takes the longest-waiting delivery of the group
// whose turn it is and, once the group has given as many as its weight in
// this turn (or has no more), puts it at the back of the line. Two kinds
// of delivery go before every group, the longest-waiting first: a parked
// one handed back to the slots (it had its turn, and may hold the limit's
// slot a finished task handed it), and one that aging lifted from the
// catch-all consumers (it waited longer than the turns would make it wait
// again).
type turns struct {
	groups map[dispatchGroup]*deliveryHeap
	line   []dispatchGroup // the groups with deliveries, next turn first (each once)
	given  int             // deliveries line[0] gave in its turn so far
	first  deliveryHeap    // woken and aged deliveries, before every group
}

func (t *turns) push(d *delivery) {
	group := groupOf(d)
	if d.flow.woken || (d.aged && group.shard >= 0) {
		heap.Push(&t.first, d)
		return
	}
	h := t.groups[group]
	if h == nil {
		if t.groups == nil {
			t.groups = map[dispatchGroup]*deliveryHeap{}
		}
		h = &deliveryHeap{}
		t.groups[group] = h // kept when it empties: a worker's groups are its shards, tenants, types
	}
	if h.Len() == 0 {
		t.line = append(t.line, group)
	}
	heap.Push(h, d)
}

// pop takes the next delivery; weights are the groups' shares of a turn.
func (t *turns) pop(weights groupWeights) *delivery {
	if t.first.Len() > 0 {
		return heap.Pop(&t.first).(*delivery)
	}
	if len(t.line) == 0 {
		return nil
	}
	group := t.line[0]
	h := t.groups[group]
	d := heap.Pop(h).(*delivery)
	t.given++
	switch {
	case h.Len() == 0:
		t.line, t.given = t.line[1:], 0
	case len(t.line) > 1 && t.given >= weights.of(group.set):
		t.line, t.given = append(t.line[1:], group), 0
	}
	return d
}

// deliveryHeap orders one priority's deliveries by waitingSince, oldest
// first, then in arrival order. It implements [heap.Interface].
type deliveryHeap []*delivery

func (h deliveryHeap) Len() int { return len(h) }
func (h deliveryHeap) Less(i, j int) bool {
	if !h[i].since.Equal(h[j].since) {
		return h[i].since.Before(h[j].since)
	}
	return h[i].order < h[j].order
}
func (h deliveryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *deliveryHeap) Push(x any) { *h = append(*h, x.(*delivery)) }

func (h *deliveryHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}
