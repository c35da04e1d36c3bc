//go:build soak

package integration

// Full sizes of the fault scenarios.
const (
	crashTasks   = 50_000
	restartTasks = 30_000
	goodTasks    = 10_000
	badTasks     = 1_000
)
