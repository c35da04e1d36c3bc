package kv_test

import (
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
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

// A record paused aside (from READY or RETRYING) waits paused aside while
// PENDING, and is held paused aside while an operator holds it PAUSED; a
// task stepped aside for a limit, or paused by an operator while READY, is
// neither.
func TestPausedAside(t *testing.T) {
	t.Parallel()
	move := func(from, to kv.State, action string) kv.Move { return kv.Move{From: from, To: to, Action: action} }
	born := move("", kv.StateReady, "submit")
	aside := move(kv.StateReady, kv.StatePending, kv.ActionPausedAside)
	hold := move(kv.StatePending, kv.StatePaused, "pause")
	for _, tc := range []struct {
		name        string
		state       kv.State
		trail       []kv.Move
		waits, held bool
	}{
		{name: "paused aside", state: kv.StatePending, trail: []kv.Move{born, aside}, waits: true},
		{name: "retry paused aside", state: kv.StatePending, trail: []kv.Move{born, move(kv.StateRunning, kv.StateRetrying, "retry"),
			move(kv.StateRetrying, kv.StatePending, kv.ActionPausedAside)}, waits: true},
		{name: "then held", state: kv.StatePaused, trail: []kv.Move{born, aside, hold}, held: true},
		{name: "held, then resumed", state: kv.StatePending, trail: []kv.Move{born, aside, hold, move(kv.StatePaused, kv.StatePending, "resume")}, waits: true},
		{name: "stepped aside, held", state: kv.StatePaused, trail: []kv.Move{born, move(kv.StateReady, kv.StatePending, kv.ActionSteppedAside), hold}},
		{name: "held while READY", state: kv.StatePaused, trail: []kv.Move{born, aside, move(kv.StatePending, kv.StateReady, "resume"), move(kv.StateReady, kv.StatePaused, "pause")}},
		{name: "released", state: kv.StateReady, trail: []kv.Move{born, aside, move(kv.StatePending, kv.StateReady, "resume")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &kv.Record{State: tc.state, Trail: tc.trail}
			require.Equal(t, tc.waits, rec.WaitsPausedAside())
			require.Equal(t, tc.held, rec.HeldPausedAside())
		})
	}
}

// A task waiting aside reads as the state it left: READY, or RETRYING for
// a retry paused aside (a unique submit's states compare with it); a task
// not waiting aside reads as none.
func TestWaitsAsideFrom(t *testing.T) {
	t.Parallel()
	born := kv.Move{To: kv.StateReady, Action: "submit"}
	retry := kv.Move{From: kv.StateRunning, To: kv.StateRetrying, Action: "retry"}
	for _, tc := range []struct {
		name  string
		state kv.State
		trail []kv.Move
		want  kv.State
	}{
		{"stepped aside", kv.StatePending, []kv.Move{born, {From: kv.StateReady, To: kv.StatePending, Action: kv.ActionSteppedAside}}, kv.StateReady},
		{"retry paused aside", kv.StatePending, []kv.Move{born, retry, {From: kv.StateRetrying, To: kv.StatePending, Action: kv.ActionPausedAside}}, kv.StateRetrying},
		{"retrying", kv.StateRetrying, []kv.Move{born, retry}, ""},
		{"delayed", kv.StatePending, []kv.Move{{To: kv.StatePending, Action: "submit"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, (&kv.Record{State: tc.state, Trail: tc.trail}).WaitsAsideFrom())
		})
	}
}

// Limits pause a task of a paused type or of a paused tenant.
func TestLimitsPauses(t *testing.T) {
	t.Parallel()
	l := &kv.Limits{Paused: map[string]kv.Pause{"report": {}, kv.TenantTargetPrefix + "acme": {}}}
	require.True(t, l.Pauses("report", "default"))
	require.True(t, l.Pauses("email", "acme"))
	require.False(t, l.Pauses("email", "default"))
	require.False(t, (*kv.Limits)(nil).Pauses("report", "acme"))
}
