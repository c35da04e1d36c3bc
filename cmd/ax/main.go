// Command ax runs and operates the ax task scheduling mesh; see README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ax-mesh/ax/internal/cli"
)

// gcPercent is the garbage collector's target unless GOGC is set: a task
// allocates a few kilobytes that die at once (records, acks, messages), so
// collecting at 4× the live heap instead of 2× spends a fifth less CPU per
// task in a worker for some tens of MB more memory (docs/BENCHMARKS.md).
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
