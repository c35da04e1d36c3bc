//go:build !soak

package integration

import "time"

// CI-friendly sizes; `go test -tags soak ./integration/` runs the full ones.
const (
	poolTasks    = 10_000
	crashTasks   = 5_000
	restartTasks = 3_000
	goodTasks    = 10_000
	badTasks     = 1_000
	stormTasks   = 1_500
	stormFor     = 20 * time.Second // the operator storm's faults and actions
	stormSettle  = 60 * time.Second // then how long every task has to end
)
