package scheduler_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/stretchr/testify/require"
)

// legacyCronJob is a cron job as stored before Task had JSON tags: the task
// under its Go field names. It is next due at next.
func legacyCronJob(next time.Time) string {
	return `{"name":"legacy","spec":"@every 1s","task":{"ID":"","Type":"report","Payload":"cA==",
"Priority":3,"Tenant":"acme","Key":"","Timeout":5000000000,"MaxAttempts":7,"Core":true,
"Deadline":"0001-01-01T00:00:00Z","Headers":{"Ax-Trace":"t1"},"RunAt":"0001-01-01T00:00:00Z","Delay":0},
"created_at":"2026-01-01T00:00:00Z","next":"` + next.UTC().Format(time.RFC3339) + `","secret":"0123456789abcdef"}`
}

// TestCronJobInTheOldFormat: a cron job stored with the task under Go field
// names is read whole, and the leader fires it with its attempts and
// timeout.
func TestCronJobInTheOldFormat(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, scheduler.Config{})
	ctx := context.Background()
	control, err := lb.js.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	_, err = control.Create(ctx, "cron.legacy", []byte(legacyCronJob(time.Now().Add(time.Second))))
	require.NoError(t, err)

	jobs, err := lb.client.ListCron(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	want := ax.TaskSpec{Type: "report", Payload: []byte("p"), Priority: ax.P3, Tenant: "acme",
		Timeout: 5 * time.Second, MaxAttempts: 7, Core: true, Headers: map[string]string{"Ax-Trace": "t1"}}
	require.Equal(t, want, jobs[0].Task)

	store, err := kv.NewStore(ctx, lb.js, nil)
	require.NoError(t, err)
	var fired *kv.Record
	require.Eventually(t, func() bool {
		recs, err := lb.client.ListCron(ctx)
		if err != nil || len(recs) != 1 || recs[0].Last.IsZero() {
			return false
		}
		fired, _, err = store.Get(ctx, kv.Ref{Tenant: "acme", ID: "cron-legacy-" + strconv.FormatInt(recs[0].Last.Unix(), 10) + "-0123456789abcdef"})
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 7, fired.MaxAttempts)
	jobs, err = lb.client.ListCron(ctx)
	require.NoError(t, err)
	require.Equal(t, want, jobs[0].Task, "rewritten in the new form, without the fire's Ax-Cron headers")
	require.Equal(t, kv.Duration(5*time.Second), fired.Timeout)
	require.Equal(t, 3, fired.Priority)
}
