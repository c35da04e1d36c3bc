package worker

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Strict priority holds whatever the weights and whatever group's turn it
// is: a P0 delivery pushed in the middle of a P2 group's weighted turn is
// taken next, and the P2 turn resumes after it. Types' groups (pools) and
// tenants' groups (fair) alike.
func TestAttackDispatchStrictPriorityWithWeights(t *testing.T) {
	for _, kind := range []string{"tenant", "type"} {
		t.Run(kind, func(t *testing.T) {
			q := newDispatchQueue()
			mk := func(name string) *shardSet {
				if kind == "tenant" {
					return &shardSet{tenant: name}
				}
				return &shardSet{typ: name}
			}
			w := map[string]int{"heavy": 5, "light": 1000}
			if kind == "tenant" {
				q.setWeights(groupWeights{tenants: w})
			} else {
				q.setWeights(groupWeights{types: w})
			}
			heavy, light := mk("heavy"), mk("light")
			base := time.Now()
			names := map[*delivery]string{}
			push := func(name string, p int, set *shardSet, waited time.Duration) {
				d := &delivery{priority: p, since: base.Add(-waited), set: set}
				names[d] = name
				require.True(t, q.push(d))
			}
			for i := range 10 {
				push(fmt.Sprintf("h%d", i), 2, heavy, time.Duration(100-i)*time.Second)
				push(fmt.Sprintf("l%d", i), 2, light, time.Duration(50-i)*time.Second)
			}
			var got []string
			take := func() { got = append(got, names[q.take()]) }
			take()
			take()
			push("p0-a", 0, light, 0) // young, in a group of weight 1000
			push("p1-a", 1, heavy, 0)
			take()
			take()
			take()
			push("p0-b", 0, heavy, time.Hour)
			take()
			take()
			require.Equal(t, []string{"h0", "h1", "p0-a", "p1-a", "h2", "p0-b", "h3"}, got)
			// heavy gave h0..h4 in its turn (5), then light its (up to 1000).
			take()
			take()
			require.Equal(t, []string{"h4", "l0"}, got[7:])
		})
	}
}

// A group that runs empty in its turn gives it up; when it gets deliveries
// again it waits at the back of the line, and its next turn is a full
// one. A weight lowered mid-turn ends the turn at the next take.
func TestAttackDispatchGroupEmptiesMidTurn(t *testing.T) {
	q := newDispatchQueue()
	q.setWeights(groupWeights{tenants: map[string]int{"a": 3}})
	a, b, c := &shardSet{tenant: "a"}, &shardSet{tenant: "b"}, &shardSet{tenant: "c"}
	base := time.Now()
	names := map[*delivery]string{}
	push := func(name string, set *shardSet, waited time.Duration) {
		d := &delivery{priority: 3, since: base.Add(-waited), set: set}
		names[d] = name
		require.True(t, q.push(d))
	}
	push("a0", a, 90*time.Second)
	push("b0", b, 80*time.Second)
	push("b1", b, 79*time.Second)
	push("c0", c, 70*time.Second)
	push("c1", c, 69*time.Second)
	var got []string
	take := func() { got = append(got, names[q.take()]) }
	take() // a0: a is empty, leaves the line
	push("a1", a, 200*time.Second)
	push("a2", a, 199*time.Second)
	push("a3", a, 198*time.Second)
	push("a4", a, 197*time.Second)
	for range 5 {
		take()
	}
	require.Equal(t, []string{"a0", "b0", "c0", "a1", "a2", "a3"}, got)
	// a's weight lowered to 1 mid-turn: b1 c1 then a4.
	q.setWeights(groupWeights{})
	for range 3 {
		take()
	}
	require.Equal(t, []string{"b1", "c1", "a4"}, got[6:])
	require.Nil(t, q.take())
}

// A group alone in its priority keeps giving; the count of its turn must
// not carry over so that, when a second group arrives, its full turn is
// cut short... or longer than its weight. Pin down what happens: once a
// second group waits, the first gives at most its weight before the
// other's turn.
func TestAttackDispatchLoneGroupThenAnother(t *testing.T) {
	q := newDispatchQueue()
	q.setWeights(groupWeights{tenants: map[string]int{"a": 3}})
	a, b := &shardSet{tenant: "a"}, &shardSet{tenant: "b"}
	base := time.Now()
	names := map[*delivery]string{}
	push := func(name string, set *shardSet, waited time.Duration) {
		d := &delivery{priority: 1, since: base.Add(-waited), set: set}
		names[d] = name
		require.True(t, q.push(d))
	}
	for i := range 20 {
		push(fmt.Sprintf("a%d", i), a, time.Duration(100-i)*time.Second)
	}
	var got []string
	take := func() { got = append(got, names[q.take()]) }
	for range 7 {
		take()
	}
	push("b0", b, 0)
	push("b1", b, 0)
	for range 6 {
		take()
	}
	t.Logf("%v", got)
	// after b arrives a may finish its turn (<= 3) then b gives one.
	idx := -1
	for i, n := range got {
		if n == "b0" {
			idx = i
		}
	}
	require.NotEqual(t, -1, idx, "b never got a turn: %v", got)
	require.LessOrEqual(t, idx-7, 3, "a gave more than its weight after b arrived: %v", got)
}

// close returns every queued delivery, whatever was taken before and
// whatever the weights, and the queue is empty after.
func TestAttackDispatchCloseReturnsAll(t *testing.T) {
	q := newDispatchQueue()
	q.setWeights(groupWeights{tenants: map[string]int{"t1": 4}, types: map[string]int{"x": 2}})
	sets := []*shardSet{nil, {tenant: "t1"}, {tenant: "t2"}, {typ: "x"}, {typ: "y"}}
	r := rand.New(rand.NewPCG(1, 2))
	in := map[*delivery]bool{}
	for i := range 500 {
		d := &delivery{priority: r.IntN(5), since: time.Now().Add(-time.Duration(r.IntN(1000)) * time.Millisecond), set: sets[r.IntN(len(sets))]}
		require.True(t, q.push(d))
		in[d] = true
		if i%3 == 0 {
			got := q.take()
			require.NotNil(t, got)
			require.True(t, in[got])
			delete(in, got)
		}
	}
	left := q.close()
	require.Len(t, left, len(in))
	for _, d := range left {
		require.True(t, in[d], "close returned a delivery twice or one taken")
		delete(in, d)
	}
	require.Empty(t, in)
	require.Nil(t, q.take())
	require.False(t, q.push(&delivery{set: sets[1]}))
}

// Random pushes and takes: every take is of the highest priority queued,
// within a group oldest first, and no delivery is lost or duplicated.
func TestAttackDispatchRandomInvariants(t *testing.T) {
	q := newDispatchQueue()
	sets := []*shardSet{{typ: "a"}, {typ: "b"}, {typ: "c"}}
	r := rand.New(rand.NewPCG(3, 4))
	queued := map[*delivery]bool{}
	base := time.Now()
	for step := range 20000 {
		if step%500 == 0 {
			q.setWeights(groupWeights{types: map[string]int{"a": r.IntN(6), "b": r.IntN(3)}})
		}
		if r.IntN(2) == 0 {
			d := &delivery{priority: r.IntN(5), since: base.Add(time.Duration(r.IntN(100)) * time.Millisecond), set: sets[r.IntN(3)]}
			require.True(t, q.push(d))
			queued[d] = true
			continue
		}
		d := q.take()
		if len(queued) == 0 {
			require.Nil(t, d)
			continue
		}
		require.NotNil(t, d)
		require.True(t, queued[d])
		for o := range queued {
			require.GreaterOrEqual(t, o.priority, d.priority, "a P%d taken before a P%d", d.priority, o.priority)
			if o.priority == d.priority && o.set == d.set {
				require.False(t, o.since.Before(d.since), "not the oldest of its group")
			}
		}
		delete(queued, d)
	}
	require.Len(t, q.close(), len(queued))
}

// The race detector on pushes, takes and weight changes from many
// goroutines.
func TestAttackDispatchConcurrent(t *testing.T) {
	q := newDispatchQueue()
	sets := []*shardSet{{tenant: "a"}, {tenant: "b"}, {typ: "c"}, nil}
	stop := make(chan struct{})
	var pushed, taken sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for g := range 4 {
		pushed.Go(func() {
			for i := range 2000 {
				q.push(&delivery{priority: (g + i) % 5, since: time.Now(), set: sets[(g*7+i)%4]})
			}
		})
	}
	for range 4 {
		taken.Go(func() {
			for {
				if d := q.pop(stop); d == nil {
					return
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	pushed.Go(func() {
		for i := range 200 {
			q.setWeights(groupWeights{tenants: map[string]int{"a": i%7 + 1}, types: map[string]int{"c": i%3 + 1}})
		}
	})
	pushed.Wait()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return n == 8000 }, 10*time.Second, time.Millisecond)
	close(stop)
	taken.Wait()
	require.Empty(t, q.close())
}
