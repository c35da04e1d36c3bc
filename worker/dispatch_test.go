package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// The slots take the highest priority first and, within a priority, the
// task that has waited longest, ties in arrival order.
func TestDispatchOrder(t *testing.T) {
	q := newDispatchQueue()
	base := time.Now()
	deliveries := []struct {
		name     string
		priority int
		waited   time.Duration
	}{
		{"p2-young", 2, 1 * time.Second},
		{"p0-young", 0, 1 * time.Second},
		{"p2-old", 2, 9 * time.Second},
		{"p0-aged", 0, 30 * time.Second},
		{"p0-young-tie", 0, 1 * time.Second},
		{"p4", 4, 60 * time.Second},
	}
	names := map[*delivery]string{}
	pl := &puller{freed: make(chan struct{}, 1)} // not started: only its credit is looked at
	for _, in := range deliveries {
		d := &delivery{priority: in.priority, since: base.Add(-in.waited), from: pl}
		names[d] = in.name
		require.True(t, q.push(d))
	}
	stop := make(chan struct{})
	var got []string
	for range deliveries {
		d := q.pop(stop)
		require.NotNil(t, d)
		got = append(got, names[d])
		pl.mu.Lock()
		free := pl.free
		pl.mu.Unlock()
		require.Equal(t, len(got), free, "%s was taken but its puller's credit was not given back", names[d])
	}
	require.Equal(t, []string{"p0-aged", "p0-young", "p0-young-tie", "p2-old", "p2-young", "p4"}, got)
}

// pop waits for a push, returns nil on stop, and close hands back what no
// slot took and refuses later pushes.
func TestDispatchWaitStopClose(t *testing.T) {
	q := newDispatchQueue()
	stop := make(chan struct{})
	popped := make(chan *delivery)
	go func() { popped <- q.pop(stop) }()
	d := &delivery{priority: 3, since: time.Now()}
	time.Sleep(20 * time.Millisecond) // let pop wait first; it must wake either way
	require.True(t, q.push(d))
	select {
	case got := <-popped:
		require.Same(t, d, got)
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting slot did not wake on push")
	}

	go func() { popped <- q.pop(stop) }()
	close(stop)
	select {
	case got := <-popped:
		require.Nil(t, got)
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting slot did not return on stop")
	}

	left := &delivery{priority: 1, since: time.Now()}
	require.True(t, q.push(left))
	require.Equal(t, []*delivery{left}, q.close())
	require.False(t, q.push(&delivery{}), "push after close")
	require.Empty(t, q.close())
}

// Many slots draining many pushes each get a distinct delivery: none is
// lost or handed out twice, and no slot sleeps while deliveries wait.
func TestDispatchManySlots(t *testing.T) {
	q := newDispatchQueue()
	stop := make(chan struct{})
	const slots, n = 8, 2000
	seen := make(chan *delivery, n)
	done := make(chan struct{})
	for range slots {
		go func() {
			for {
				d := q.pop(stop)
				if d == nil {
					done <- struct{}{}
					return
				}
				seen <- d
			}
		}()
	}
	for i := range n {
		require.True(t, q.push(&delivery{priority: i % 5, since: time.Now()}))
	}
	got := map[*delivery]bool{}
	for range n {
		select {
		case d := <-seen:
			require.False(t, got[d], "handed out twice")
			got[d] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d deliveries reached a slot", len(got), n)
		}
	}
	close(stop)
	for range slots {
		<-done
	}
}

// A queued delivery whose heartbeats went unconfirmed for 5/6 of the ack
// wait is given up, never claimed: JetStream may have redelivered it.
func TestExpiredDeliveryIsNotClaimed(t *testing.T) {
	cfg := &Config{AckWait: 3 * time.Second}
	cl := &claimer{cfg: cfg, log: zap.NewNop(), stats: &counters{}}
	fresh := &delivery{lastBeat: time.Now().Add(-2 * time.Second)}
	require.False(t, cl.expired(fresh), "2 s of a 2.5 s lapse")
	require.False(t, fresh.settled)
	stale := &delivery{lastBeat: time.Now().Add(-2600 * time.Millisecond)}
	require.True(t, cl.expired(stale))
	require.True(t, stale.settled, "no heartbeat or answer goes out for it any more")
	require.EqualValues(t, 1, cl.stats.Dropped.Load())
}

// On a fair deployment the tenants of a priority take turns, each giving
// its longest-waiting delivery: a tenant with many old deliveries gets one
// start in turn with each other tenant, and a higher priority still goes
// first. Elsewhere (every delivery of one group) the order is by age.
func TestDispatchTakesTenantsInTurn(t *testing.T) {
	q := newDispatchQueue()
	base := time.Now()
	bulk, small, other := &shardSet{tenant: "bulk"}, &shardSet{tenant: "small"}, &shardSet{tenant: "other"}
	names := map[*delivery]string{}
	push := func(name string, set *shardSet, priority int, waited time.Duration) {
		d := &delivery{priority: priority, since: base.Add(-waited), set: set}
		names[d] = name
		require.True(t, q.push(d))
	}
	for i := range 5 {
		push(fmt.Sprintf("bulk-%d", i), bulk, 2, time.Duration(60-i)*time.Second) // bulk-0 oldest
	}
	push("small-young", small, 2, time.Second)
	push("small-old", small, 2, 2*time.Second)
	push("other", other, 2, 0)
	push("p0", bulk, 0, 0)
	stop := make(chan struct{})
	var got []string
	for range names {
		got = append(got, names[q.pop(stop)])
	}
	require.Equal(t, []string{"p0", "bulk-0", "small-old", "other", "bulk-1", "small-young", "bulk-2", "bulk-3", "bulk-4"}, got)
}

// A tenant's weight is its share of a turn: with heavy weighing 3, both
// tenants' backlogs start three of heavy's for one of light's, each still
// oldest first, until one of them runs out. A weight of a tenant with no
// deliveries, and a changed weight, take effect at the next turn.
func TestDispatchTakesTenantsByWeight(t *testing.T) {
	q := newDispatchQueue()
	q.setWeights(groupWeights{tenants: map[string]int{"heavy": 3, "idle": 5}, types: map[string]int{"light": 4}})
	base := time.Now()
	heavy, light := &shardSet{tenant: "heavy"}, &shardSet{tenant: "light"}
	names := map[*delivery]string{}
	push := func(name string, set *shardSet, waited time.Duration) {
		d := &delivery{priority: 2, since: base.Add(-waited), set: set}
		names[d] = name
		require.True(t, q.push(d))
	}
	for i := range 8 {
		push(fmt.Sprintf("h%d", i), heavy, time.Duration(60-i)*time.Second)
	}
	for i := range 3 {
		push(fmt.Sprintf("l%d", i), light, time.Duration(30-i)*time.Second)
	}
	stop := make(chan struct{})
	var got []string
	for range 9 {
		got = append(got, names[q.pop(stop)])
	}
	require.Equal(t, []string{"h0", "h1", "h2", "l0", "h3", "h4", "h5", "l1", "h6"}, got)
	q.setWeights(groupWeights{}) // the weight removed: turns of one each
	for range names {
		d := q.take()
		if d == nil {
			break
		}
		got = append(got, names[d])
	}
	require.Equal(t, []string{"h0", "h1", "h2", "l0", "h3", "h4", "h5", "l1", "h6", "h7", "l2"}, got)
}

// On the shared layout the shards of a priority (the partitions of the
// tasks' keys) take turns, each giving its longest-waiting delivery: a
// key's backlog on one shard gets one start in turn with each other shard.
// A task that aging lifted, and a parked one handed back to the slots, go
// before every turn, oldest first, and a higher priority still goes first.
func TestDispatchTakesShardsInTurn(t *testing.T) {
	q := newDispatchQueue()
	base := time.Now()
	names := map[*delivery]string{}
	push := func(name string, shard, priority int, waited time.Duration, aged bool) {
		d := &delivery{priority: priority, shard: shard, since: base.Add(-waited), aged: aged, flow: flowState{woken: name == "woken"}}
		names[d] = name
		require.True(t, q.push(d))
	}
	for i := range 4 {
		push(fmt.Sprintf("bulk-%d", i), 5, 2, time.Duration(60-i)*time.Second, false) // bulk-0 oldest
	}
	push("other-young", 7, 2, time.Second, false)
	push("other-old", 7, 2, 2*time.Second, false)
	push("third", 9, 2, 0, false)
	push("aged-young", 9, 2, 70*time.Second, true)
	push("aged-old", 3, 2, 90*time.Second, true)
	push("woken", 5, 2, 80*time.Second, false) // a parked delivery handed back: first too
	push("p0", 5, 0, 0, false)
	stop := make(chan struct{})
	var got []string
	for range names {
		got = append(got, names[q.pop(stop)])
	}
	require.Equal(t, []string{"p0", "aged-old", "woken", "aged-young", "bulk-0", "other-old", "third", "bulk-1", "other-young", "bulk-2", "bulk-3"}, got)
	push("left-aged", 3, 1, time.Minute, true)
	push("left", 3, 1, time.Minute, false)
	require.Len(t, q.close(), 2, "close hands back the aged deliveries too")
}

// On a fair deployment a parked delivery handed back to the slots goes
// before every tenant's turn (it may hold a limit's slot), while a task
// that aging lifted takes its tenant's turn.
func TestDispatchWokenGoesFirst(t *testing.T) {
	q := newDispatchQueue()
	base := time.Now()
	bulk, small := &shardSet{tenant: "bulk"}, &shardSet{tenant: "small"}
	names := map[*delivery]string{}
	push := func(name string, set *shardSet, waited time.Duration, woken, aged bool) {
		d := &delivery{priority: 2, since: base.Add(-waited), set: set, flow: flowState{woken: woken}, aged: aged}
		names[d] = name
		require.True(t, q.push(d))
	}
	push("bulk-0", bulk, 60*time.Second, false, false)
	push("bulk-1", bulk, 59*time.Second, false, false)
	push("small-aged", small, 90*time.Second, false, true)
	push("small-woken", small, time.Second, true, false)
	stop := make(chan struct{})
	var got []string
	for range names {
		got = append(got, names[q.pop(stop)])
	}
	require.Equal(t, []string{"small-woken", "bulk-0", "small-aged", "bulk-1"}, got)
}
