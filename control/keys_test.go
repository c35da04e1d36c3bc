package control_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ax-mesh/ax/control"
	"github.com/stretchr/testify/require"
)

// docs/WIRE.md's row of AX_CONTROL names every key ax writes there, and
// no key it does not ("paused types" were never stored there).
func TestControlBucketKeysAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/WIRE.md")
	require.NoError(t, err)
	var row string
	for line := range strings.SplitSeq(string(doc), "\n") {
		if strings.HasPrefix(line, "| `AX_CONTROL` |") {
			row = line
		}
	}
	require.NotEmpty(t, row, "docs/WIRE.md has no row of AX_CONTROL")
	keys, _, _ := strings.Cut(strings.TrimPrefix(row, "| `AX_CONTROL` |"), "|")
	var documented []string
	for _, k := range strings.Split(keys, ",") {
		documented = append(documented, strings.Trim(strings.TrimSpace(k), "`"))
	}
	written := []string{control.PressureKey, control.CronKeyPrefix + "<name>", control.ShardTableKey, control.PoolTableKey,
		control.UnservedDeadlinesKey, control.ReconcilerKey, control.RejectsKey, control.LimitsKey, control.TenantsKey,
		control.WorkflowPausedPrefix + "<tenant>.<id>"}
	require.ElementsMatch(t, written, documented, row)
}
