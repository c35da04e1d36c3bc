package worker

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// dispatchModel checks each take of a dispatch queue against the order the
// docs promise (docs/decisions/strict-priority.md and
// fair-shares-between-keys.md; docs/SCHEDULER.md, aging): the highest priority queued;
// within it a woken delivery, or an aged one of the catch-all consumers,
// before every turn, oldest first, ties in arrival order; else the oldest
// of its group, and no group gives more than its weight while another
// group waits for its turn.
type dispatchModel struct {
	t       *testing.T
	weights groupWeights
	queued  map[*delivery]bool
	// since[p][g][h]: deliveries group h gave from the turns of priority p
	// since group g last gave or joined the line (g has deliveries).
	since [streams.Priorities]map[dispatchGroup]map[dispatchGroup]int
}

func newDispatchModel(t *testing.T, weights groupWeights) *dispatchModel {
	m := &dispatchModel{t: t, weights: weights, queued: map[*delivery]bool{}}
	for p := range m.since {
		m.since[p] = map[dispatchGroup]map[dispatchGroup]int{}
	}
	return m
}

// modelGroup is the group the docs give d, written out here rather
// than taken from groupOf: a tenant's or a type's consumers (any shard),
// else the shard of the catch-all consumers.
func modelGroup(d *delivery) dispatchGroup {
	if d.set != nil && (d.set.tenant != "" || d.set.typ != "") {
		return dispatchGroup{set: d.set, shard: -1}
	}
	return dispatchGroup{set: d.set, shard: d.shard}
}

// modelFirst reports whether d goes before the turns of its priority.
func modelFirst(d *delivery) bool {
	return d.flow.woken || (d.aged && modelGroup(d).shard >= 0)
}

// modelBefore reports whether a goes before b in a heap's order.
func modelBefore(a, b *delivery) bool {
	if !a.since.Equal(b.since) {
		return a.since.Before(b.since)
	}
	return a.order < b.order
}

// waiting reports whether group g of priority p has deliveries in the
// turns (not in the first heap).
func (m *dispatchModel) waiting(p int, g dispatchGroup) bool {
	for d := range m.queued {
		if d.priority == p && !modelFirst(d) && modelGroup(d) == g {
			return true
		}
	}
	return false
}

// pushed records d, just pushed.
func (m *dispatchModel) pushed(d *delivery) {
	if !modelFirst(d) {
		g := modelGroup(d)
		if !m.waiting(d.priority, g) {
			m.since[d.priority][g] = map[dispatchGroup]int{} // g joins the line
		}
	}
	m.queued[d] = true
}

// took checks d, just taken (nil: the queue gave nothing).
func (m *dispatchModel) took(d *delivery) {
	t := m.t
	t.Helper()
	if len(m.queued) == 0 {
		require.Nil(t, d, "a delivery from an empty queue")
		return
	}
	require.NotNil(t, d, "nothing taken while %d deliveries are queued", len(m.queued))
	require.True(t, m.queued[d], "a delivery not queued (taken twice?)")
	top := streams.Priorities
	for q := range m.queued {
		top = min(top, q.priority)
	}
	require.Equal(t, top, d.priority, "P%d taken while P%d waits", d.priority, top)
	var firstBest, groupBest *delivery
	g := modelGroup(d)
	for q := range m.queued {
		if q.priority != top {
			continue
		}
		if modelFirst(q) {
			if firstBest == nil || modelBefore(q, firstBest) {
				firstBest = q
			}
		} else if modelGroup(q) == g && (groupBest == nil || modelBefore(q, groupBest)) {
			groupBest = q
		}
	}
	delete(m.queued, d)
	if firstBest != nil {
		require.Same(t, firstBest, d, "not the oldest woken or aged delivery, which go before the turns")
		return
	}
	require.Same(t, groupBest, d, "not the oldest of its group")
	level := m.since[top]
	for other, gave := range level {
		if other == g {
			continue
		}
		gave[g]++
		require.LessOrEqual(t, gave[g], m.weights.of(g.set), "group %v gave more than its weight while group %v waited for its turn", g, other)
	}
	if m.waiting(top, g) {
		level[g] = map[dispatchGroup]int{}
	} else {
		delete(level, g)
	}
}

// modelLayouts are the deployments' groups: the shared layout's shards,
// a fair deployment's tenants, a pools deployment's types.
func modelLayouts() []struct {
	name    string
	sets    []*shardSet
	weights groupWeights
} {
	catchAll := &shardSet{}
	tenants := []*shardSet{{tenant: "heavy"}, {tenant: "light"}, {tenant: "mid"}}
	types := []*shardSet{{typ: "heavy"}, {typ: "light"}, {typ: "mid"}}
	return []struct {
		name    string
		sets    []*shardSet
		weights groupWeights
	}{
		{"shared", []*shardSet{catchAll}, groupWeights{}},
		{"shared-weights-ignored", []*shardSet{catchAll}, groupWeights{tenants: map[string]int{"heavy": 4}, types: map[string]int{"heavy": 3}}},
		{"fair", tenants, groupWeights{tenants: map[string]int{"heavy": 3, "mid": 2}}},
		{"pools", types, groupWeights{types: map[string]int{"heavy": 4}}},
	}
}

// Random pushes (every priority, shard, group, with aged and woken
// deliveries and many equal waiting times) and takes: every take is what
// the docs promise (see [dispatchModel]), and close hands back the rest,
// each once.
func TestDispatchAttackRandomOrder(t *testing.T) {
	t.Parallel()
	for _, layout := range modelLayouts() {
		t.Run(layout.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(20) {
				q := newDispatchQueue()
				q.setWeights(layout.weights)
				m := newDispatchModel(t, layout.weights)
				r := rand.New(rand.NewPCG(seed, 7))
				base := time.Now()
				var taken []*delivery
				for range 3000 {
					if r.IntN(100) < 55 {
						d := &delivery{
							priority: r.IntN(streams.Priorities),
							shard:    r.IntN(streams.Shards),
							set:      layout.sets[r.IntN(len(layout.sets))],
							since:    base.Add(time.Duration(r.IntN(20)) * time.Second), // many ties
							aged:     r.IntN(10) == 0,
							flow:     flowState{woken: r.IntN(15) == 0},
						}
						require.True(t, q.push(d))
						m.pushed(d)
						continue
					}
					d := q.take()
					m.took(d)
					if d != nil {
						taken = append(taken, d)
					}
				}
				left := q.close()
				require.Len(t, left, len(m.queued))
				for _, d := range left {
					require.True(t, m.queued[d], "close handed back a delivery twice or one taken")
					delete(m.queued, d)
				}
				require.Greater(t, len(taken), 1000)
				require.False(t, q.push(&delivery{shard: 1, set: layout.sets[0]}), "push after close")
				require.Nil(t, q.take())
				require.Empty(t, q.close())
			}
		})
	}
}

// Strict priority holds whatever the turns and the first heap hold: an
// aged or woken delivery of a lower priority, however old, never goes
// before a higher priority's youngest delivery, and a higher priority's
// deliveries pushed mid-turn go next; the turn resumes where it was.
func TestDispatchAttackPriorityBeforeFirstAndTurns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  func(i int) *shardSet // the set of the i-th group
	}{
		{"shards", func(int) *shardSet { return nil }},
		{"tenants", func(i int) *shardSet { return &shardSet{tenant: fmt.Sprint("t", i)} }},
		{"types", func(i int) *shardSet { return &shardSet{typ: fmt.Sprint("y", i)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newDispatchQueue()
			base := time.Now()
			sets := []*shardSet{tt.set(0), tt.set(1), tt.set(2)}
			names := map[*delivery]string{}
			push := func(name string, group, priority int, waited time.Duration, aged, woken bool) {
				d := &delivery{priority: priority, shard: group, set: sets[group], since: base.Add(-waited), aged: aged, flow: flowState{woken: woken}}
				names[d] = name
				require.True(t, q.push(d))
			}
			var got []string
			take := func() { got = append(got, names[q.take()]) }
			push("p3-a0", 0, 3, 50*time.Second, false, false)
			push("p3-a1", 0, 3, 49*time.Second, false, false)
			push("p3-b0", 1, 3, 10*time.Second, false, false)
			push("p3-aged", 2, 3, time.Hour, true, false)
			push("p3-woken", 2, 3, 2*time.Hour, false, true)
			push("p1-young", 1, 1, 0, false, false)
			take()
			require.Equal(t, []string{"p1-young"}, got, "an aged or woken P3 delivery went before a P1")
			take()
			take() // the first heap (or, on fair and pools, p3-aged's group's turn)
			push("p0-mid-turn", 1, 0, 0, false, false)
			push("p2-aged", 0, 2, 3*time.Hour, true, false)
			push("p2-woken", 1, 2, 0, false, true)
			take()
			take()
			take()
			require.Equal(t, "p0-mid-turn", got[3])
			require.ElementsMatch(t, []string{"p2-aged", "p2-woken"}, got[4:6], "a P2 delivery waits behind P3's turns")
			for range 3 {
				take()
			}
			require.Nil(t, q.take())
			if tt.name == "shards" {
				require.Equal(t, []string{"p1-young", "p3-woken", "p3-aged", "p0-mid-turn", "p2-aged", "p2-woken", "p3-a0", "p3-b0", "p3-a1"}, got)
			} else { // an aged task takes its tenant's or type's turn; a woken one goes first
				require.Equal(t, []string{"p1-young", "p3-woken", "p3-a0", "p0-mid-turn", "p2-woken", "p2-aged", "p3-b0", "p3-aged", "p3-a1"}, got)
			}
		})
	}
}

// On fair and pools deployments a tenant's (a type's) deliveries are one
// group whatever shard they came from: a tenant pulling from 8 shards
// gets its weight's share of a turn, not a turn per shard; and a woken
// delivery taken in the middle of a weighted turn neither ends nor counts
// in it.
func TestDispatchAttackWeightedGroupsSpanShards(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"tenant", "type"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			q := newDispatchQueue()
			set := func(name string) *shardSet {
				if kind == "tenant" {
					return &shardSet{tenant: name}
				}
				return &shardSet{typ: name}
			}
			w := map[string]int{"heavy": 2}
			if kind == "tenant" {
				q.setWeights(groupWeights{tenants: w})
			} else {
				q.setWeights(groupWeights{types: w})
			}
			heavy, light := set("heavy"), set("light")
			base := time.Now()
			names := map[*delivery]string{}
			push := func(name string, s *shardSet, shard int, waited time.Duration, woken bool) {
				d := &delivery{priority: 2, shard: shard, set: s, since: base.Add(-waited), flow: flowState{woken: woken}}
				names[d] = name
				require.True(t, q.push(d))
			}
			for i := range 8 {
				push(fmt.Sprint("h", i), heavy, i, time.Duration(100-i)*time.Second, false) // one per shard, h0 oldest
			}
			for i := range 4 {
				push(fmt.Sprint("l", i), light, 31-i, time.Duration(50-i)*time.Second, false)
			}
			var got []string
			take := func() { got = append(got, names[q.take()]) }
			take() // h0: heavy's turn has begun
			push("l-woken", light, 3, 0, true)
			for range 12 {
				take()
			}
			require.Nil(t, q.take())
			require.Equal(t, []string{"h0", "l-woken", "h1", "l0", "h2", "h3", "l1", "h4", "h5", "l2", "h6", "h7", "l3"}, got)
		})
	}
}

// Within one shard (one group) the order is by waiting time, oldest first,
// ties in arrival order; likewise in the first heap, and a woken delivery
// pushed again takes its place there by its waiting time.
func TestDispatchAttackOrderWithinShard(t *testing.T) {
	t.Parallel()
	q := newDispatchQueue()
	base := time.Now()
	r := rand.New(rand.NewPCG(11, 12))
	type item struct {
		d     *delivery
		since int
		n     int
	}
	var items []item
	for n := range 400 {
		s := r.IntN(10)
		d := &delivery{priority: 1, shard: 4, since: base.Add(time.Duration(s) * time.Millisecond)}
		require.True(t, q.push(d))
		items = append(items, item{d, s, n})
	}
	for range len(items) {
		d := q.take()
		require.NotNil(t, d)
		best := -1
		for i, it := range items {
			if it.d != nil && (best == -1 || it.since < items[best].since) {
				best = i // the first of equal waiting times is the earliest pushed
			}
		}
		require.Same(t, items[best].d, d, "not the oldest, or a tie out of arrival order (want #%d)", items[best].n)
		items[best].d = nil
	}
	require.Nil(t, q.take())

	// The first heap: woken and aged, ties in arrival order; a re-pushed
	// (woken) delivery arrives anew.
	names := map[*delivery]string{}
	push := func(name string, d *delivery) {
		names[d] = name
		require.True(t, q.push(d))
	}
	tie := base.Add(-time.Minute)
	push("aged-1", &delivery{priority: 1, shard: 2, since: tie, aged: true})
	woken := &delivery{priority: 1, shard: 9, since: tie}
	push("plain", woken) // queued, taken, parked, then woken
	push("aged-2", &delivery{priority: 1, shard: 5, since: tie, aged: true})
	require.Equal(t, "aged-1", names[q.take()])
	require.Equal(t, "aged-2", names[q.take()])
	require.Same(t, woken, q.take())
	woken.flow.woken = true
	push("woken", woken)
	push("aged-3", &delivery{priority: 1, shard: 5, since: tie, aged: true})
	push("aged-old", &delivery{priority: 1, shard: 7, since: tie.Add(-time.Second), aged: true})
	var got []string
	for range 3 {
		got = append(got, names[q.take()])
	}
	require.Equal(t, []string{"aged-old", "woken", "aged-3"}, got)
}

// A long run over every shard and priority, groups filling and emptying:
// the line always holds exactly the groups with deliveries, each once; a
// take finds a delivery whenever one is queued (empty groups are skipped);
// the groups and the line stay bounded by the worker's shards, however
// many deliveries went through.
func TestDispatchAttackNoLeak(t *testing.T) {
	t.Parallel()
	q := newDispatchQueue()
	catchAll := &shardSet{}
	r := rand.New(rand.NewPCG(5, 6))
	base := time.Now()
	queued, maxQueued := 0, 0
	check := func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		total := 0
		for p := range q.levels {
			lv := &q.levels[p]
			require.LessOrEqual(t, len(lv.groups), streams.Shards, "P%d holds more groups than shards", p)
			require.LessOrEqual(t, cap(lv.line), 4*streams.Shards, "P%d's line grows", p)
			inLine := map[dispatchGroup]bool{}
			for _, g := range lv.line {
				require.False(t, inLine[g], "group %v twice in P%d's line", g, p)
				inLine[g] = true
			}
			for g, h := range lv.groups {
				require.Equal(t, h.Len() > 0, inLine[g], "group %v (%d queued) and P%d's line disagree", g, h.Len(), p)
				require.LessOrEqual(t, cap(*h), max(2*maxQueued, 8), "a group's heap keeps growing")
				total += h.Len()
			}
			require.Len(t, inLine, len(lv.line))
			require.LessOrEqual(t, cap(lv.first), max(2*maxQueued, 8), "the first heap keeps growing")
			total += lv.first.Len()
		}
		require.Equal(t, queued, total)
		require.Equal(t, queued, q.queued)
	}
	for step := range 200_000 {
		// Bursts on a few shards, then drains: groups fill and empty often.
		if (step/1000)%2 == 0 && queued < 300 || queued == 0 {
			d := &delivery{priority: r.IntN(streams.Priorities), shard: r.IntN(streams.Shards), set: catchAll,
				since: base.Add(time.Duration(step) * time.Microsecond), aged: r.IntN(20) == 0, flow: flowState{woken: r.IntN(30) == 0}}
			require.True(t, q.push(d))
			queued++
			maxQueued = max(maxQueued, queued)
		} else {
			require.NotNil(t, q.take(), "a take found nothing while %d are queued", queued)
			queued--
		}
		if step%997 == 0 {
			check()
		}
	}
	for queued > 0 {
		require.NotNil(t, q.take())
		queued--
	}
	check()
	require.Nil(t, q.take())
	for p := range q.levels {
		require.Empty(t, q.levels[p].line)
		require.Zero(t, q.levels[p].given)
	}
}

// Slots popping, receivers pushing (some of them woken or aged), the
// weights changing and the worker stopping, all at once: every delivery a
// push accepted reaches a slot or close's hand-back, exactly once, and
// none a refused push offered. Run with -race.
func TestDispatchAttackConcurrentClose(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		q := newDispatchQueue()
		stop := make(chan struct{})
		sets := []*shardSet{{}, {tenant: "a"}, {typ: "b"}}
		var (
			mu       sync.Mutex
			accepted = map[*delivery]bool{}
			refused  = map[*delivery]bool{}
			seen     = map[*delivery]int{}
		)
		var pushers, slots sync.WaitGroup
		for i := range 4 {
			pushers.Go(func() {
				r := rand.New(rand.NewPCG(uint64(round), uint64(i)))
				for range 2000 {
					d := &delivery{priority: r.IntN(streams.Priorities), shard: r.IntN(streams.Shards), set: sets[r.IntN(len(sets))],
						since: time.Now(), aged: r.IntN(5) == 0, flow: flowState{woken: r.IntN(7) == 0}}
					ok := q.push(d)
					mu.Lock()
					if ok {
						accepted[d] = true
					} else {
						refused[d] = true
					}
					mu.Unlock()
				}
			})
		}
		for range 3 {
			slots.Go(func() {
				for {
					d := q.pop(stop)
					if d == nil {
						return
					}
					mu.Lock()
					seen[d]++
					mu.Unlock()
				}
			})
		}
		slots.Go(func() {
			for i := range 50 {
				q.setWeights(groupWeights{tenants: map[string]int{"a": i % 4}, types: map[string]int{"b": i % 3}})
			}
		})
		time.Sleep(time.Duration(round%5) * time.Millisecond) // close at various points of the run
		left := q.close()
		pushers.Wait()
		close(stop)
		slots.Wait()
		for _, d := range left {
			seen[d]++
		}
		require.Nil(t, q.take())
		require.Len(t, seen, len(accepted), "round %d: accepted %d, handed out %d", round, len(accepted), len(seen))
		for d, n := range seen {
			require.Equal(t, 1, n, "round %d: a delivery handed out %d times", round, n)
			require.True(t, accepted[d], "round %d: a refused delivery was handed out", round)
		}
		require.Equal(t, 8000, len(accepted)+len(refused))
	}
}
