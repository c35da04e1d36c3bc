package axtype

import (
	"slices"
)

// State is the state of a task.
type State string

// The states of a task. See [CanTransition] for the legal moves.
const (
	StatePending   State = "PENDING"   // accepted; waiting for its run time
	StateReady     State = "READY"     // in a priority bucket, waiting for a worker
	StateRunning   State = "RUNNING"   // claimed by one worker, under a timeout
	StateRetrying  State = "RETRYING"  // failed or timed out; waiting for its backoff
	StateSucceeded State = "SUCCEEDED" // done
	StateDead      State = "DEAD"      // attempts exhausted or permanent error; in the DLQ
	StateCancelled State = "CANCELLED" // cancelled by an operator; never retried
	StatePaused    State = "PAUSED"    // held by an operator; kept with its payload
)

// transitions is the one table of legal moves. Nothing else in ax decides
// which state may follow which.
//
// PAUSED -> PAUSED binds the first message of an id an operator paused
// before any message of it was seen (the message is kept for the resume).
//
// The leader's reconciler needs four moves for a task whose message was
// lost: PENDING -> DEAD and READY -> DEAD when no payload is left anywhere
// (nothing could ever run it; DEAD shows it to an operator with the reason
// "message lost"), RETRYING -> READY when it re-publishes a lost retry's
// payload (the copy waits in its bucket like any READY task), and
// READY -> PENDING when the payload still waits in AX_DELAYED for a future
// run time (the mover releases only PENDING tasks). PENDING -> DEAD also
// ends a delayed task whose schedule AX_DELAYED, or whose released copy its
// bucket, refused for what the message is: it could never run.
//
// READY -> PENDING is also a worker's step aside: a task over a limit that
// its worker has no room to park waits in AX_DELAYED until a run time,
// out of its shard consumer's ack pending (worker/limits_aside.go). So is
// RETRYING -> PENDING, for a retry whose type or tenant is paused when its
// backoff is over: it waits for the pause to end out of its consumer
// (worker/pause_aside.go).
var transitions = map[State][]State{
	StatePending:   {StateReady, StateCancelled, StatePaused, StatePending, StateDead},
	StateReady:     {StateRunning, StateCancelled, StatePaused, StateReady, StateDead, StatePending},
	StateRunning:   {StateSucceeded, StateRetrying, StateDead, StateCancelled, StateReady},
	StateRetrying:  {StateRunning, StateDead, StateCancelled, StatePaused, StateReady, StatePending},
	StateSucceeded: {},
	StateDead:      {StateReady},
	StateCancelled: {},
	StatePaused:    {StateReady, StateCancelled, StatePending, StatePaused},
}

// births are the states a record may be created in: PENDING (delayed), READY
// (a Go submit), RUNNING (a worker's first sight of a raw publish), CANCELLED
// or PAUSED (an operator acting on a task no worker has seen), DEAD (the
// leader dead-lettering a raw publish no worker has seen, whose type no live
// worker served within the operator's deadline, on a pools deployment; or a
// due delayed task with no record whose copy its bucket refused).
var births = []State{StatePending, StateReady, StateRunning, StateCancelled, StatePaused, StateDead}

// States returns every state, in the order of docs/WIRE.md.
func States() []State {
	return []State{StatePending, StateReady, StateRunning, StateRetrying, StateSucceeded, StateDead, StateCancelled, StatePaused}
}

// CanTransition reports whether a record may move from one state to another.
func CanTransition(from, to State) bool { return slices.Contains(transitions[from], to) }

// CanBeBornAs reports whether a record may be created in state s.
func CanBeBornAs(s State) bool { return slices.Contains(births, s) }

// Terminal reports whether no move leaves s except an operator's replay
// (SUCCEEDED, DEAD, CANCELLED).
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateDead || s == StateCancelled
}

// Waiting reports whether a task in s has not started its current attempt
// and can be cancelled, paused or reprioritized without touching a handler.
func (s State) Waiting() bool {
	return s == StatePending || s == StateReady || s == StateRetrying
}

// Valid reports whether s is one of [States].
func (s State) Valid() bool { _, ok := transitions[s]; return ok }
