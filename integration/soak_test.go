//go:build soak

package integration

import "time"

// Full sizes of the fault scenarios.
const (
	poolTasks    = 10_000
	crashTasks   = 50_000
	restartTasks = 30_000
	goodTasks    = 10_000
	badTasks     = 1_000
	stormTasks   = 10_000
	stormFor     = 90 * time.Second // the operator storm's faults and actions
	stormSettle  = 5 * time.Minute  // then how long every task has to end
)
