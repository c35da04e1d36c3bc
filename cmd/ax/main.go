// Command ax runs and operates the ax task scheduling mesh; see README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ax-mesh/ax/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
