package ax_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/stretchr/testify/require"
)

func TestCronValidation(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		job  ax.CronJob
		want string
	}{
		{"bad spec", ax.CronJob{Name: "a", Spec: "every second", Task: ax.TaskSpec{Type: "x"}}, "cron spec"},
		{"bad name", ax.CronJob{Name: "a.b", Spec: "@hourly", Task: ax.TaskSpec{Type: "x"}}, "cron name"},
		{"no type", ax.CronJob{Name: "a", Spec: "@hourly"}, "Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Client.AddCron(ctx, tc.job)
			require.ErrorIs(t, err, ax.ErrInvalidTask)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// 5 fields (minute first), 6 fields (second first) and descriptors.
	for i, spec := range []string{"*/5 * * * *", "*/10 * * * * *", "@daily", "@every 90s"} {
		job, err := b.Client.AddCron(ctx, ax.CronJob{Name: fmt.Sprintf("ok%d", i), Spec: spec, Task: ax.TaskSpec{Type: "x"}})
		require.NoError(t, err, spec)
		require.True(t, job.Next.After(time.Now()), spec)
	}
	jobs, err := b.Client.ListCron(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 4)
}

// Upcoming counts a job's times as the leader does: from its last fire (or
// its creation), each the first time the spec names after the one before;
// more than CronMaxCatchUp missed times are skipped, as the leader skips
// them.
func TestCronUpcomingCountsAsTheLeader(t *testing.T) {
	t.Parallel()
	at := func(h, m, s int) time.Time { return time.Date(2030, 1, 1, h, m, s, 0, time.UTC) }
	cases := []struct {
		name  string
		job   ax.CronJob
		after time.Time
		want  []time.Time
	}{
		{"every: from the creation, not from after", ax.CronJob{Spec: "@every 1h", CreatedAt: at(12, 0, 0)}, at(12, 20, 0),
			[]time.Time{at(13, 0, 0), at(14, 0, 0), at(15, 0, 0)}},
		{"every: from the last fire", ax.CronJob{Spec: "@every 1h", CreatedAt: at(1, 30, 0), Last: at(12, 30, 0)}, at(12, 40, 0),
			[]time.Time{at(13, 30, 0), at(14, 30, 0), at(15, 30, 0)}},
		{"every: missed times the leader will fire are not upcoming", ax.CronJob{Spec: "@every 10s", CreatedAt: at(12, 0, 5)}, at(12, 1, 0),
			[]time.Time{at(12, 1, 5), at(12, 1, 15), at(12, 1, 25)}},
		{"every: beyond the catch-up, from after", ax.CronJob{Spec: "@every 7s", CreatedAt: at(10, 0, 0)}, at(12, 0, 0).Add(500 * time.Millisecond),
			[]time.Time{at(12, 0, 7), at(12, 0, 14), at(12, 0, 21)}},
		{"cron line", ax.CronJob{Spec: "0 3 * * *", CreatedAt: at(1, 0, 0)}, at(12, 0, 0),
			[]time.Time{at(3, 0, 0).AddDate(0, 0, 1), at(3, 0, 0).AddDate(0, 0, 2), at(3, 0, 0).AddDate(0, 0, 3)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.job.Upcoming(c.after, 3)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			// The leader's count: from ScheduleFrom, Next after Next.
			sched, err := c.job.Schedule()
			require.NoError(t, err)
			next := sched.Next(c.job.ScheduleFrom())
			for n := 0; !next.After(c.after) && n < ax.CronMaxCatchUp; n++ {
				next = sched.Next(next)
			}
			if !next.After(c.after) {
				next = sched.Next(c.after)
			}
			require.Equal(t, c.want[0], next)
		})
	}
}
