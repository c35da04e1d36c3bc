// Package integration runs ax as real processes: it builds the ax binary
// once, starts `ax dev` and `ax worker` processes on 127.0.0.1, and checks
// what operators see through the CLI and what the records say.
//
// The fault scenarios run the "probe" task type, which journals every
// execution (see builtin.ProbeEvent): its start, an "effect" line right
// before each attempt at its side effect, and its end. From the journals
// (journal_test.go) the scenarios count overlapping executions of a task
// (one started before another ended; a killed worker's execution ends at
// its death) and effect attempts: a task's second attempt must follow a
// failure of the first (its worker killed past the effect line, its effect
// write failed, or its outcome write failed), else two executions reached
// the effect. The effects bucket behind the probe is create-if-absent, so
// it alone would hide a second effect.
package integration
