package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A change of the limits hands every parked delivery back to the slots to
// take its group's turn again: a backlog parked for a limit does not go
// before every other group's deliveries (it did when each went back
// woken), while a delivery handed back alone, a slot of its limit free,
// still goes first.
func TestLimitsChangeKeepsTheTurns(t *testing.T) {
	t.Parallel()
	w, js := shardZeroWorker(t)
	msg, _ := fetchShardZero(t, js, "partner", []byte("x")) // its data is all a parked delivery's reservation reads

	tenantA, tenantB := &shardSet{tenant: "a"}, &shardSet{tenant: "b"}
	base := time.Now()
	label := map[*delivery]string{}
	newDelivery := func(name string, set *shardSet, waited time.Duration) *delivery {
		d := &delivery{msg: msg, priority: 2, shard: 0, set: set, since: base.Add(-waited)}
		label[d] = name
		return d
	}
	var parked []*delivery
	for i := range 4 {
		parked = append(parked, newDelivery(fmt.Sprint("a", i), tenantA, time.Duration(100-i)*time.Second))
	}
	for i := range 3 {
		require.True(t, w.dispatch.push(newDelivery(fmt.Sprint("b", i), tenantB, time.Duration(10-i)*time.Second)))
	}
	w.gate.mu.Lock()
	w.gate.parked = map[string][]*delivery{"partner": parked}
	w.gate.mu.Unlock()
	w.gate.unparkAll()
	var got []string
	var woken []string
	for d := w.dispatch.take(); d != nil; d = w.dispatch.take() {
		got = append(got, label[d])
		if d.flow.woken {
			woken = append(woken, label[d])
		}
	}
	require.Equal(t, []string{"b0", "a0", "b1", "a1", "b2", "a2", "a3"}, got, "the tenants take turns")
	require.Empty(t, woken, "handed back by a change of the limits, not woken")

	// Handed back alone (a slot given back), the oldest goes first.
	w.gate.mu.Lock()
	w.gate.parked = map[string][]*delivery{"rate partner": {parked[3], parked[2]}}
	w.gate.mu.Unlock()
	require.True(t, w.dispatch.push(newDelivery("b3", tenantB, time.Hour)))
	w.gate.unpark("rate partner")
	d := w.dispatch.take()
	require.Equal(t, "a3", label[d])
	require.True(t, d.flow.woken)
}
