// Package admin is ax's management API (docs/API.md): [Service] is a NATS
// micro service on "<prefix>.admin.<verb>" that the CLI and the dashboard
// call through [Client].
//
// Safety: every action is one compare-and-set on the task's record through
// the transition table, so an action never overwrites a move it did not
// read; a re-dispatched message carries the next generation and is
// published before the record names it, so a crash between the steps leaves
// at most a copy that workers drop. Liveness: an action that keeps losing
// the race gives up with a 409 after a few tries.
package admin
