package kv_test

import (
	"testing"

	"github.com/ax-mesh/ax/kv"
	"github.com/stretchr/testify/require"
)

// A record waits stepped aside when it is PENDING and the move that took
// it there, as its trail keeps it, is a step aside; a later PENDING ->
// PENDING move or a pause and its resume do not change that, and a
// delayed task's PENDING (born so, or put back by the reconciler) is not
// one.
func TestWaitsSteppedAside(t *testing.T) {
	t.Parallel()
	move := func(from, to kv.State, action string) kv.Move { return kv.Move{From: from, To: to, Action: action} }
	born := move("", kv.StateReady, "submit")
	aside := move(kv.StateReady, kv.StatePending, kv.ActionSteppedAside)
	for _, tc := range []struct {
		name  string
		state kv.State
		trail []kv.Move
		want  bool
	}{
		{name: "stepped aside", state: kv.StatePending, trail: []kv.Move{born, aside}, want: true},
		{name: "then reprioritized", state: kv.StatePending, trail: []kv.Move{born, aside, move(kv.StatePending, kv.StatePending, "reprioritize")}, want: true},
		{name: "released", state: kv.StateReady, trail: []kv.Move{born, aside, move(kv.StatePending, kv.StateReady, "due")}},
		{name: "stepped aside before, delayed now", state: kv.StatePending,
			trail: []kv.Move{born, aside, move(kv.StatePending, kv.StateReady, "due"), move(kv.StateReady, kv.StatePending, "reconcile")}},
		{name: "born delayed", state: kv.StatePending, trail: []kv.Move{move("", kv.StatePending, "submit")}},
		{name: "paused, then resumed", state: kv.StatePending,
			trail: []kv.Move{born, aside, move(kv.StatePending, kv.StatePaused, "pause"), move(kv.StatePaused, kv.StatePending, "resume")}, want: true},
		{name: "delayed, paused, then resumed", state: kv.StatePending,
			trail: []kv.Move{move("", kv.StatePending, "submit"), move(kv.StatePending, kv.StatePaused, "pause"), move(kv.StatePaused, kv.StatePending, "resume")}},
		{name: "no trail", state: kv.StatePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &kv.Record{State: tc.state, Trail: tc.trail}
			require.Equal(t, tc.want, rec.WaitsSteppedAside())
		})
	}
}
