package scheduler

import (
	"fmt"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// The scan cursors of the types no longer expiring are forgotten: types a
// producer made up come and go, and the leader's memory must not keep one
// cursor per type it ever saw.
func TestUnservedForgetsCursorsOfGoneTypes(t *testing.T) {
	t.Parallel()
	u := &unservedExpiry{l: &Leader{cfg: &Config{}}, cursor: map[string]uint64{}}
	for i := range 1000 {
		u.cursor[u.filter(i%5, fmt.Sprintf("made-up-%d", i))] = uint64(i)
	}
	u.cursor[u.filter(2, "report")] = 7
	u.forgetCursors(map[string]kv.Duration{"report": 1})
	require.Equal(t, map[string]uint64{"ax.p2.*.*.report.>": 7}, u.cursor)
}
