package ax_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/stretchr/testify/require"
)

func TestCronValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
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
			_, err := b.client.AddCron(ctx, tc.job)
			require.ErrorIs(t, err, ax.ErrInvalidTask)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// 5 fields (minute first), 6 fields (second first) and descriptors.
	for i, spec := range []string{"*/5 * * * *", "*/10 * * * * *", "@daily", "@every 90s"} {
		job, err := b.client.AddCron(ctx, ax.CronJob{Name: fmt.Sprintf("ok%d", i), Spec: spec, Task: ax.TaskSpec{Type: "x"}})
		require.NoError(t, err, spec)
		require.True(t, job.Next.After(time.Now()), spec)
	}
	jobs, err := b.client.ListCron(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 4)
}
