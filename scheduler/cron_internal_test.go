package scheduler

import (
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/stretchr/testify/require"
)

// Issue 11.12: the catch-up cap skipped to the next time in the leader's
// local zone. A daily "0 0 * * *" job is UTC midnight whatever the zone of
// the clock that reads it.
func TestCronCatchUpSkipsInUTC(t *testing.T) {
	t.Parallel()
	job := ax.CronJob{Name: "daily", Spec: "0 0 * * *"}
	sched, err := job.Schedule()
	require.NoError(t, err)
	plus5 := time.FixedZone("UTC+5", 5*3600)
	now := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC).In(plus5) // 03:00 on Dec 1 at UTC+5
	s := &cronState{job: job, sched: sched}
	s.skipTo(now)
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), s.next.UTC(), "next UTC midnight, not local midnight")
}
