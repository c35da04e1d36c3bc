//go:build !soak

package integration

// CI-friendly sizes; `go test -tags soak ./integration/` runs the full ones.
const (
	crashTasks   = 5_000
	restartTasks = 3_000
	goodTasks    = 10_000
	badTasks     = 1_000
)
