package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/dashboard"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Task search filters by id prefix, type, tenant and state; a task's page
// has its record and its whole trail; an unknown id is the API's 404.
func TestTaskSearchAndDetail(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{AllowActions: true})
	b.Submit(t, ax.TaskSpec{ID: "inv-1", Type: "invoice", Tenant: "acme"})
	b.Submit(t, ax.TaskSpec{ID: "inv-2", Type: "invoice", Tenant: "globex"})
	b.Submit(t, ax.TaskSpec{ID: "mail-1", Type: "email", Tenant: "acme"})
	var paused map[string]any
	require.Equal(t, http.StatusOK, b.act(t, "task.pause", `{"id":"inv-2"}`, nil, &paused))

	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"id prefix", "id=inv-", []string{"inv-2", "inv-1"}},
		{"type and tenant", "type=invoice&tenant=acme", []string{"inv-1"}},
		{"state", "state=paused", []string{"inv-2"}},
		{"several states", "state=READY,PAUSED&tenant=globex", []string{"inv-2"}},
		{"none", "tenant=initech", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reply admin.TasksListReply
			require.Equal(t, http.StatusOK, b.get(t, "/api/tasks?"+tc.query, &reply))
			var ids []string
			for _, rec := range reply.Tasks {
				ids = append(ids, rec.ID)
			}
			require.Equal(t, tc.want, ids)
		})
	}
	var bad apiError
	require.Equal(t, http.StatusBadRequest, b.get(t, "/api/tasks?state=SLEEPY", &bad))
	require.Contains(t, bad.Message, "unknown state")

	var detail dashboard.TaskDetail
	require.Equal(t, http.StatusOK, b.get(t, "/api/tasks/inv-2", &detail))
	require.Equal(t, kv.StatePaused, detail.Task.State)
	require.Len(t, detail.Trail, 2)
	require.Equal(t, kv.StateReady, detail.Trail[0].To)
	require.Equal(t, "pause", detail.Trail[1].Action)

	var missing apiError
	require.Equal(t, http.StatusNotFound, b.get(t, "/api/tasks/nope", &missing))
	require.Contains(t, missing.Message, "unknown task")
}

// Without AllowActions every action is refused with 403 and changes
// nothing; with it, an action needs the confirmation header and a
// same-origin page, and the API's own refusals pass through.
func TestActionsGuarded(t *testing.T) {
	t.Parallel()
	ro := setup(t, dashboard.Config{})
	id := ro.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme"})
	for _, verb := range []string{"task.cancel", "task.pause", "task.resume", "task.reprioritize", "dlq.replay"} {
		var refused apiError
		require.Equal(t, http.StatusForbidden, ro.act(t, verb, `{"id":"`+id+`"}`, nil, &refused), verb)
		require.Contains(t, refused.Message, "--allow-actions")
	}
	require.Equal(t, kv.StateReady, ro.Get(t, id).State)

	rw := setupDashboardOn(t, ro, dashboard.Config{AllowActions: true})
	for _, tc := range []struct {
		name, verb, body string
		headers          map[string]string
		code             int
		contains         string
	}{
		{"unknown verb", "tasks.cancel", `{"type":"email"}`, nil, http.StatusNotFound, "unknown action"},
		{"not confirmed", "task.cancel", `{"id":"` + id + `"}`, map[string]string{"X-Ax-Confirm": ""}, http.StatusBadRequest, "confirmed"},
		{"no token", "task.cancel", `{"id":"` + id + `"}`, map[string]string{"X-Ax-Token": ""}, http.StatusForbidden, "token"},
		{"wrong token", "task.cancel", `{"id":"` + id + `"}`, map[string]string{"X-Ax-Token": "0123456789abcdef0123456789abcdef"}, http.StatusForbidden, "token"},
		{"cross origin", "task.cancel", `{"id":"` + id + `"}`, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden, "cross-origin"},
		{"not JSON", "task.cancel", `id=` + id, nil, http.StatusBadRequest, "JSON request"},
		{"illegal move", "task.resume", `{"id":"` + id + `"}`, nil, http.StatusConflict, "applies only to PAUSED"},
		{"unknown task", "task.cancel", `{"id":"nope"}`, nil, http.StatusNotFound, "unknown task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e apiError
			require.Equal(t, tc.code, rw.act(t, tc.verb, tc.body, tc.headers, &e))
			require.Contains(t, e.Message, tc.contains)
		})
	}
	require.Equal(t, kv.StateReady, rw.Get(t, id).State, "no refused action changed the task")

	var reply admin.TaskReply
	require.Equal(t, http.StatusOK, rw.act(t, "task.reprioritize", `{"id":"`+id+`","priority":3}`, nil, &reply))
	require.Equal(t, 3, reply.Task.Priority)
	require.Equal(t, http.StatusOK, rw.act(t, "task.pause", `{"id":"`+id+`"}`, nil, &reply))
	require.Equal(t, http.StatusOK, rw.act(t, "task.resume", `{"id":"`+id+`"}`, nil, &reply))
	require.Equal(t, kv.StateReady, reply.Task.State)
	require.Equal(t, http.StatusOK, rw.act(t, "task.cancel", `{"id":"`+id+`"}`, map[string]string{"Origin": rw.srv.URL}, &reply))
	require.Equal(t, kv.StateCancelled, rw.Get(t, id).State)
}

// A task that failed permanently is listed on the DLQ page; replaying it
// (one, then in bulk by filter) brings it back and it succeeds.
func TestDLQListAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{AllowActions: true})
	var broken atomic.Bool
	broken.Store(true)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("charge", func(context.Context, *worker.Task) error {
		if broken.Load() {
			return worker.Permanent(errors.New("card processor down"))
		}
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})

	ids := []string{
		b.Submit(t, ax.TaskSpec{ID: "c-1", Type: "charge", Tenant: "acme"}),
		b.Submit(t, ax.TaskSpec{ID: "c-2", Type: "charge", Tenant: "acme"}),
		b.Submit(t, ax.TaskSpec{ID: "c-3", Type: "charge", Tenant: "globex"}),
	}
	var list admin.DLQListReply
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b.get(c, "/api/dlq", &list)
		assert.EqualValues(c, 3, list.Total)
	}, 20*time.Second, 50*time.Millisecond)
	require.Contains(t, list.Letters[0].Error, "card processor down")
	b.get(t, "/api/dlq?tenant=acme", &list)
	require.EqualValues(t, 2, list.Total)

	broken.Store(false)
	var one admin.DLQReplayReply
	require.Equal(t, http.StatusOK, b.act(t, "dlq.replay", `{"id":"c-3"}`, nil, &one))
	require.Equal(t, []kv.Ref{{Tenant: "globex", ID: "c-3"}}, one.Replayed)
	var bulk admin.DLQReplayReply
	require.Equal(t, http.StatusOK, b.act(t, "dlq.replay", `{"tenant":"acme","limit":100}`, nil, &bulk))
	require.ElementsMatch(t, []kv.Ref{{Tenant: "acme", ID: "c-1"}, {Tenant: "acme", ID: "c-2"}}, bulk.Replayed)
	for _, id := range ids {
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, kv.StateSucceeded, b.Get(c, id).State) }, 20*time.Second, 50*time.Millisecond, id)
	}
	b.get(t, "/api/dlq", &list)
	require.Zero(t, list.Total)
}

// The cron page lists the control bucket's cron.<name> records with their
// next runs computed from the spec; a bad spec is shown, not hidden.
func TestCron(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	var empty dashboard.CronReply
	require.Equal(t, http.StatusOK, b.get(t, "/api/cron", &empty))
	require.Empty(t, empty.Jobs)

	bucket, err := b.JS.KeyValue(context.Background(), "AX_CONTROL")
	require.NoError(t, err)
	_, err = bucket.Put(context.Background(), "cron.nightly", []byte(`{"name":"nightly","spec":"0 3 * * *",
		"task":{"type":"report","tenant":"acme","priority":2},"created_at":"2026-01-01T00:00:00Z","next":"2030-01-01T03:00:00Z"}`))
	require.NoError(t, err)
	_, err = bucket.Put(context.Background(), "cron.broken", []byte(`{"name":"broken","spec":"every tuesday"}`))
	require.NoError(t, err)
	_, err = bucket.Put(context.Background(), "pressure", []byte(`{}`))
	require.NoError(t, err)

	var reply dashboard.CronReply
	require.Equal(t, http.StatusOK, b.get(t, "/api/cron", &reply))
	require.Len(t, reply.Jobs, 2)
	broken, nightly := reply.Jobs[0], reply.Jobs[1]
	require.Contains(t, broken.Error, "bad spec")
	require.Equal(t, "nightly", nightly.Name)
	require.Equal(t, "report", nightly.Type)
	require.Equal(t, 2, nightly.Priority)
	require.Equal(t, time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC), nightly.Next.UTC())
	require.Len(t, nightly.Upcoming, 5)
	for i, at := range nightly.Upcoming {
		require.True(t, at.After(reply.Now), "run %d is in the future", i)
		require.Equal(t, 3, at.UTC().Hour())
		if i > 0 {
			require.Equal(t, 24*time.Hour, at.Sub(nightly.Upcoming[i-1]))
		}
	}
}

// The cron page's next runs of an "@every" job are the leader's: counted
// from the job's creation (or last fire), not from the page's now.
func TestCronEveryRunsAsTheLeaderCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	ctx := context.Background()
	bucket, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	created := time.Now().UTC().Add(-20 * time.Minute).Truncate(time.Second)
	_, err = bucket.Put(ctx, "cron.hourly", []byte(fmt.Sprintf(`{"name":"hourly","spec":"@every 1h",
		"task":{"type":"report"},"created_at":%q}`, created.Format(time.RFC3339Nano))))
	require.NoError(t, err)
	var reply dashboard.CronReply
	require.Equal(t, http.StatusOK, b.get(t, "/api/cron", &reply))
	require.Len(t, reply.Jobs, 1)
	job := reply.Jobs[0]
	require.Empty(t, job.Error)
	require.Len(t, job.Upcoming, 5)
	for i, at := range job.Upcoming {
		require.Equal(t, created.Add(time.Duration(i+1)*time.Hour), at.UTC(), "run %d: an hour after the one before, from the job's creation", i)
	}
}

// /api/cron never returns a job's secret, in any field: the record it
// passes on has it masked, in every spelling encoding/json reads.
func TestCronHidesSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	ctx := context.Background()
	added, err := b.Client.AddCron(ctx, ax.CronJob{Name: "digest", Spec: "0 7 * * *", Task: ax.TaskSpec{Type: "digest"}})
	require.NoError(t, err)
	require.NotEmpty(t, added.Secret)
	jobs, err := b.Client.ListCron(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	secrets := []string{jobs[0].Secret, "0123456789abcdef"}
	bucket, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "cron.legacy", []byte(`{"name":"legacy","spec":"@hourly","task":{"type":"x"},"Secret":"0123456789abcdef"}`))
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "cron.broken", []byte(`{"name":"broken","secret":"0123456789abcdef"`))
	require.NoError(t, err)

	var raw json.RawMessage
	require.Equal(t, http.StatusOK, b.get(t, "/api/cron", &raw))
	for _, secret := range secrets {
		require.NotContains(t, string(raw), secret)
	}
	var reply dashboard.CronReply
	require.NoError(t, json.Unmarshal(raw, &reply))
	require.Len(t, reply.Jobs, 3)
	for _, job := range reply.Jobs {
		if job.Name == "broken" {
			require.Contains(t, job.Error, "unreadable record")
			require.Contains(t, []string{"", "null"}, string(job.Record), "an unreadable record is not passed on")
			continue
		}
		var stored ax.CronJob
		require.NoError(t, json.Unmarshal(job.Record, &stored), job.Name)
		require.Equal(t, "xxxxx", stored.Secret, job.Name)
		require.Equal(t, job.Spec, stored.Spec, "the rest of the record is passed on")
	}
}

// The workers page lists the members of the workers bucket with their
// shards. (Workers publish their membership lease there; the records are
// written here as a worker writes them.)
func TestWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	ctx := context.Background()
	bucket, err := b.JS.KeyValue(ctx, "AX_WORKERS")
	require.NoError(t, err)
	for i, shards := range [][]int{{0, 2, 4}, {1, 3}} {
		member, err := json.Marshal(kv.Member{ID: fmt.Sprintf("w-%d", i), Host: "vm", Concurrency: 8, Shards: shards})
		require.NoError(t, err)
		lease, err := json.Marshal(kv.LeaseRecord{Holder: fmt.Sprintf("w-%d", i), RenewedAt: time.Now(), Data: member})
		require.NoError(t, err)
		_, err = bucket.Put(ctx, fmt.Sprintf("w-%d", i), lease)
		require.NoError(t, err)
	}
	var reply admin.WorkersReply
	require.Equal(t, http.StatusOK, b.get(t, "/api/workers", &reply))
	require.Len(t, reply.Workers, 2)
	require.Equal(t, "w-0", reply.Workers[0].ID)
	require.Equal(t, []int{0, 2, 4}, reply.Workers[0].Shards)
	require.Equal(t, []int{1, 3}, reply.Workers[1].Shards)
}

// The limits page lists the limits with their use and the pauses; the
// operator sets and removes a limit and pauses and resumes a type through
// the dashboard's actions.
func TestLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{AllowActions: true})
	var reply admin.LimitsReply
	require.Equal(t, http.StatusOK, b.get(t, "/api/limits", &reply))
	require.Empty(t, reply.Limits)
	require.Equal(t, http.StatusOK, b.act(t, admin.VerbLimitSet, `{"target":"partner","concurrency":10}`, nil, &reply))
	require.Equal(t, http.StatusOK, b.act(t, admin.VerbLimitSet, `{"target":"tenant:acme","weight":3}`, nil, &reply))
	require.Equal(t, http.StatusOK, b.act(t, admin.VerbPause, `{"tenant":"acme"}`, nil, &reply))
	require.Equal(t, http.StatusOK, b.get(t, "/api/limits", &reply))
	require.Len(t, reply.Limits, 2)
	require.Equal(t, "partner", reply.Limits[0].Target)
	require.Equal(t, 10, reply.Limits[0].Concurrency)
	require.Equal(t, "tenant:acme", reply.Limits[1].Target)
	require.Equal(t, 3, reply.Limits[1].Weight)
	require.Len(t, reply.Paused, 1)
	require.Equal(t, "tenant:acme", reply.Paused[0].Target)
	require.Equal(t, http.StatusOK, b.act(t, admin.VerbResume, `{"tenant":"acme"}`, nil, &reply))
	require.Equal(t, http.StatusOK, b.act(t, admin.VerbLimitRemove, `{"target":"partner"}`, nil, &reply))
	require.Equal(t, http.StatusOK, b.act(t, admin.VerbLimitRemove, `{"target":"tenant:acme"}`, nil, &reply))
	require.Empty(t, reply.Limits)
	require.Empty(t, reply.Paused)
}
