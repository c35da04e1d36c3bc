package kv

import "github.com/ax-mesh/ax/axtype"

// State is the state of a task: [axtype.State], the one definition of the
// states and the table of legal moves, named here for the store's callers.
type State = axtype.State

// The states of a task ([axtype.State]).
const (
	StatePending   = axtype.StatePending
	StateReady     = axtype.StateReady
	StateRunning   = axtype.StateRunning
	StateRetrying  = axtype.StateRetrying
	StateSucceeded = axtype.StateSucceeded
	StateDead      = axtype.StateDead
	StateCancelled = axtype.StateCancelled
	StatePaused    = axtype.StatePaused
)

// States returns every state, in the order of docs/WIRE.md ([axtype.States]).
func States() []State { return axtype.States() }

// CanTransition reports whether a record may move from one state to another
// ([axtype.CanTransition]).
func CanTransition(from, to State) bool { return axtype.CanTransition(from, to) }

// CanBeBornAs reports whether a record may be created in state s
// ([axtype.CanBeBornAs]).
func CanBeBornAs(s State) bool { return axtype.CanBeBornAs(s) }
