// Package integration runs ax as real processes: it builds the ax binary
// once, starts `ax dev` and `ax worker` processes on 127.0.0.1, and checks
// what operators see through the CLI and what the records say.
package integration
