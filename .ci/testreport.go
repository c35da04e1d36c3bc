// Command testreport prints the events of `go test -json` read from
// standard input as `go test` prints them without -json (each failed
// test's output, a line per package), then the 15 slowest tests, each
// package's time and the total. It exits 1 when a test or a package failed,
// a package did not build, or no package reported. .ci/run and the README's
// test command run it: go test -race -timeout 30m -json ./... 2>&1 | go run .ci/testreport.go
package main

import (
	"os"

	"github.com/ax-mesh/ax/internal/testreport"
)

func main() { os.Exit(testreport.Run(os.Stdin, os.Stdout, 15)) }
