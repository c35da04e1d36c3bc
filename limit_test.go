package ax_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/stretchr/testify/require"
)

// The client's limits and pauses go through the management API; a bad
// target or limit is refused and changes nothing.
func TestClientLimitsAndPauses(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	d, err := deploy.Open(ctx, b.JS, nil)
	require.NoError(t, err)
	api, err := d.Admin(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, api.Start(ctx))
	t.Cleanup(func() { _ = api.Stop(ctx) })

	report, err := b.Client.SetLimit(ctx, ax.KeyTarget("order-*"), ax.Limit{Concurrency: 1})
	require.NoError(t, err)
	require.Len(t, report.Limits, 1)
	report, err = b.Client.Pause(ctx, ax.TenantTarget("acme"))
	require.NoError(t, err)
	require.Len(t, report.Paused, 1)
	require.Equal(t, "tenant:acme", report.Paused[0].Target)

	for name, call := range map[string]func() (*ax.LimitsReport, error){
		"empty target": func() (*ax.LimitsReport, error) { return b.Client.SetLimit(ctx, "", ax.Limit{Concurrency: 1}) },
		"empty tenant": func() (*ax.LimitsReport, error) {
			return b.Client.SetLimit(ctx, ax.TenantTarget(""), ax.Limit{Concurrency: 1})
		},
		"negative":           func() (*ax.LimitsReport, error) { return b.Client.SetLimit(ctx, "resize", ax.Limit{Concurrency: -1}) },
		"pause of a key":     func() (*ax.LimitsReport, error) { return b.Client.Pause(ctx, ax.KeyTarget("order-*")) },
		"resume a bad token": func() (*ax.LimitsReport, error) { return b.Client.Resume(ctx, "a.b") },
		"remove bad":         func() (*ax.LimitsReport, error) { return b.Client.RemoveLimit(ctx, "tenant:") },
	} {
		_, err := call()
		require.Error(t, err, name)
	}
	report, err = b.Client.Limits(ctx)
	require.NoError(t, err)
	require.Len(t, report.Limits, 1, "a refused change changed nothing")
	require.Len(t, report.Paused, 1)

	_, err = b.Client.Resume(ctx, ax.TenantTarget("acme"))
	require.NoError(t, err)
	report, err = b.Client.RemoveLimit(ctx, ax.KeyTarget("order-*"))
	require.NoError(t, err)
	require.Empty(t, report.Limits)
	require.Empty(t, report.Paused)
	_, err = b.Client.RemoveLimit(ctx, "resize")
	var apiErr *admin.Error
	require.ErrorAs(t, err, &apiErr, "no limit to remove")
	require.Equal(t, 404, apiErr.Code)
}

// Without the management API the client says so.
func TestClientLimitsWithoutManagementAPI(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	_, err := b.Client.SetLimit(context.Background(), "resize", ax.Limit{Concurrency: 2})
	require.Error(t, err)
	var apiErr *admin.Error
	require.NotErrorAs(t, err, &apiErr)
	require.Contains(t, err.Error(), "set limit of resize")
}

// TaskInfo.Priority is a Priority, as TaskSpec.Priority is: it prints and
// encodes as "p1", not as a number.
func TestTaskInfoPriorityIsAPriority(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "email", Priority: ax.P1})
	require.NoError(t, err)
	require.Equal(t, ax.P1, info.Priority)
	require.Equal(t, "priority p1", fmt.Sprintf("priority %s", info.Priority))
	data, err := json.Marshal(info)
	require.NoError(t, err)
	require.Contains(t, string(data), `"priority":"p1"`)
	var back ax.TaskInfo
	require.NoError(t, json.Unmarshal([]byte(`{"id":"a","priority":3}`), &back), "a number, as ax submit --json printed before")
	require.Equal(t, ax.P3, back.Priority)
}
