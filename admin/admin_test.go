package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminBundle is a deployment with the management API and a client of it.
type adminBundle struct {
	*axtest.Bundle
	api *admin.Client
}

// setupAdmin starts a server with ax provisioned, the management API and a
// submit client; no worker runs, so submitted tasks stay READY.
func setupAdmin(t testing.TB) *adminBundle {
	t.Helper()
	return setupAdminWith(t, axtest.Options{})
}

// setupAdminFast is setupAdmin for a test of the fast tier (go test -short).
func setupAdminFast(t testing.TB) *adminBundle {
	t.Helper()
	return setupAdminWith(t, axtest.Options{Server: natstest.Options{Fast: true}})
}

// setupAdminWith is setupAdmin on the deployment o.
func setupAdminWith(t testing.TB, o axtest.Options) *adminBundle {
	t.Helper()
	b := axtest.Setup(t, o)
	return &adminBundle{Bundle: b, api: b.StartAdmin(t, &admin.Config{Version: "1.2.3"})}
}

func (b *adminBundle) call(t *testing.T, verb string, req, resp any) error {
	return axtest.Call(b.api, verb, req, resp)
}

func requireCode(t *testing.T, err error, code int, contains string) {
	t.Helper()
	require.ErrorIs(t, err, &admin.Error{Code: code})
	require.ErrorContains(t, err, contains)
}

func TestAdminIsAMicroServiceWithEveryVerb(t *testing.T) {
	t.Parallel()
	b := setupAdminFast(t)
	subject, err := micro.ControlSubject(micro.InfoVerb, "ax", "")
	require.NoError(t, err)
	msg, err := b.NC.Request(subject, nil, 10*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, jsonUnmarshal(msg.Data, &info))
	require.Equal(t, "ax", info.Name)
	require.Equal(t, "1.2.3", info.Version)
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	for _, verb := range admin.Verbs() {
		require.Contains(t, subjects, "ax.admin."+verb)
	}
}

func TestAdminGetAndTrail(t *testing.T) {
	t.Parallel()
	b := setupAdminFast(t)
	id := b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme", Priority: ax.P2})
	var got admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskGet, admin.TaskRequest{ID: id}, &got))
	require.Equal(t, kv.StateReady, got.Task.State)
	require.Equal(t, "acme", got.Task.Tenant)
	var trail admin.TrailReply
	require.NoError(t, b.call(t, admin.VerbTaskTrail, admin.TaskRequest{ID: id}, &trail))
	require.Len(t, trail.Trail, 1)
	require.Equal(t, "publish", trail.Trail[0].Action) // a task of generated id and key: its record is written at the claim
}

func TestAdminBadRequests(t *testing.T) {
	t.Parallel()
	b := setupAdminFast(t)
	done := b.Submit(t, ax.TaskSpec{Type: "email"})
	_, err := kvCancel(b, t, done)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, verb string
		req        any
		code       int
		contains   string
	}{
		{"unknown task", admin.VerbTaskGet, admin.TaskRequest{ID: "nope"}, 404, "unknown task"},
		{"missing id", admin.VerbTaskTrail, admin.TaskRequest{}, 400, `"id" is required`},
		{"bad id", admin.VerbTaskCancel, admin.TaskRequest{ID: "a.b"}, 400, "task id"},
		{"unknown field", admin.VerbTaskGet, map[string]any{"id": "x", "bogus": 1}, 400, "not valid JSON"},
		{"not json", admin.VerbTaskGet, "garbage", 400, "not valid JSON"},
		{"cancel terminal", admin.VerbTaskCancel, admin.TaskRequest{ID: done}, 409, "is CANCELLED: cancel applies only to"},
		{"pause unknown", admin.VerbTaskPause, admin.TaskRequest{ID: "ghost"}, 404, "--unseen"},
		{"resume not paused", admin.VerbTaskResume, admin.TaskRequest{ID: done}, 409, "resume applies only to"},
		{"bad priority", admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: done, Priority: 7}, 400, "not 0..4"},
		{"reprioritize terminal", admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: done, Priority: 1}, 409, "only a READY or PENDING task"},
		{"batch without filter", admin.VerbTasksCancel, admin.BatchCancelRequest{}, 400, "needs a filter"},
		{"batch bad state", admin.VerbTasksCancel, admin.BatchCancelRequest{Filter: admin.Filter{States: []kv.State{"DONE"}}}, 400, "unknown state"},
		{"batch terminal state", admin.VerbTasksCancel, admin.BatchCancelRequest{Filter: admin.Filter{States: []kv.State{kv.StateDead}}}, 400, "cannot be cancelled"},
		{"batch bad tenant", admin.VerbTasksCancel, admin.BatchCancelRequest{Filter: admin.Filter{Tenant: "a b"}}, 400, "bad filter"},
		{"dlq bad limit", admin.VerbDLQList, admin.DLQListRequest{Limit: -1}, 400, `"limit"`},
		{"replay nothing", admin.VerbDLQReplay, admin.DLQReplayRequest{}, 400, "needs"},
		{"replay both", admin.VerbDLQReplay, admin.DLQReplayRequest{ID: "x", Filter: admin.Filter{Type: "t"}}, 400, "either"},
		{"replay not dead", admin.VerbDLQReplay, admin.DLQReplayRequest{ID: done}, 409, "replay applies only to DEAD"},
		{"stats bad window", admin.VerbStats, admin.StatsRequest{Window: "soon"}, 400, "window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp map[string]any
			requireCode(t, b.call(t, tc.verb, tc.req, &resp), tc.code, tc.contains)
		})
	}
}

func kvCancel(b *adminBundle, t *testing.T, id string) (*admin.TaskReply, error) {
	var reply admin.TaskReply
	err := b.call(t, admin.VerbTaskCancel, admin.TaskRequest{ID: id}, &reply)
	return &reply, err
}

func TestAdminCancelWaitingAndUnseen(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	id := b.Submit(t, ax.TaskSpec{Type: "email"})
	reply, err := kvCancel(b, t, id)
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, reply.Task.State)
	require.Equal(t, "cancel", reply.Task.LastMove().Action)
	require.NotNil(t, reply.Task.FinishedAt)

	var unseen admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskPause, admin.TaskRequest{ID: "raw-1", Tenant: "acme", Unseen: true}, &unseen))
	require.Equal(t, "acme", unseen.Task.Tenant)
	requireCode(t, b.call(t, admin.VerbTaskPause, admin.TaskRequest{ID: "raw-2", Unseen: true}, &unseen), admin.CodeBadRequest, `give its "tenant"`)
	require.True(t, unseen.Created)
	require.Equal(t, kv.StatePaused, unseen.Task.State)
}

// A pause keeps the task's message; the resume publishes a new copy of it
// (one generation more) and deletes the old one. A task submitted without
// an id of its own has no record until then (generation 0: its record is
// written at the claim, or by the operator's first move); one with an id
// has its submit's (generation 1).
func TestAdminPauseResumeRedispatches(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	for _, tc := range []struct {
		id    string
		gen   uint64
		first string
	}{{"", 0, "publish"}, {"own-id", 1, "submit"}} {
		id := b.Submit(t, ax.TaskSpec{ID: tc.id, Type: "email", Payload: []byte("keep me"), Priority: ax.P1, Headers: map[string]string{"Ax-Trace": "t1"}})
		var paused admin.TaskReply
		require.NoError(t, b.call(t, admin.VerbTaskPause, admin.TaskRequest{ID: id}, &paused))
		require.Equal(t, kv.StatePaused, paused.Task.State)
		require.Equal(t, uint64(1), natstest.StreamMsgs(t, b.JS, "AX_P1"), "pause keeps the message")

		var resumed admin.TaskReply
		require.NoError(t, b.call(t, admin.VerbTaskResume, admin.TaskRequest{ID: id}, &resumed))
		require.True(t, resumed.Redispatched)
		require.Equal(t, kv.StateReady, resumed.Task.State)
		require.Equal(t, tc.gen+1, resumed.Task.Gen)
		require.Equal(t, uint64(1), natstest.StreamMsgs(t, b.JS, "AX_P1"), "the old copy is deleted")
		msg := natstest.GetMsg(t, b.JS, "AX_P1", resumed.Task.StreamSeq)
		require.Equal(t, "keep me", string(msg.Data))
		require.Equal(t, fmt.Sprint(tc.gen+1), msg.Header.Get(streams.HeaderGen))
		require.Equal(t, id, msg.Header.Get(streams.HeaderTaskID))
		require.Equal(t, "t1", msg.Header.Get("Ax-Trace"))
		require.True(t, strings.HasSuffix(msg.Subject, ".ctl"), "a control-plane copy: %s", msg.Subject)
		opts, err := streams.ParseCopyHeaders(msg.Header)
		require.NoError(t, err)
		require.Equal(t, id, opts.ID, "a worker reads the task id of the copy")
		var trail admin.TrailReply
		require.NoError(t, b.call(t, admin.VerbTaskTrail, admin.TaskRequest{ID: id}, &trail))
		var actions []string
		for _, m := range trail.Trail {
			actions = append(actions, m.Action)
		}
		require.Equal(t, []string{tc.first, "pause", "resume"}, actions)
		var cancelled admin.TaskReply
		require.NoError(t, b.call(t, admin.VerbTaskCancel, admin.TaskRequest{ID: id}, &cancelled))
		require.Zero(t, natstest.StreamMsgs(t, b.JS, "AX_P1"))
	}
}

func TestAdminReprioritizeMovesBucket(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	id := b.Submit(t, ax.TaskSpec{Type: "email", Payload: []byte("p"), Priority: ax.P4})
	var reply admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: 0}, &reply))
	require.Equal(t, 0, reply.Task.Priority)
	require.Equal(t, uint64(1), reply.Task.Gen, "its first message had generation 0: no record was written at submit")
	require.Equal(t, "reprioritize", reply.Task.LastMove().Action)
	require.Equal(t, uint64(0), natstest.StreamMsgs(t, b.JS, "AX_P4"))
	require.Equal(t, uint64(1), natstest.StreamMsgs(t, b.JS, "AX_P0"))
	requireCode(t, b.call(t, admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: 0}, &reply), 400, "already P0")
}

func TestAdminBatchCancel(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	var acme []string
	for i := range 5 {
		acme = append(acme, b.Submit(t, ax.TaskSpec{ID: fmt.Sprintf("acme-%d", i), Type: "email", Tenant: "acme"}))
	}
	other := b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "globex"})
	report := b.Submit(t, ax.TaskSpec{Type: "report", Tenant: "acme"})

	var dry admin.BatchCancelReply
	req := admin.BatchCancelRequest{Filter: admin.Filter{Type: "email", Tenant: "acme", States: []kv.State{kv.StateReady}}, DryRun: true}
	require.NoError(t, b.call(t, admin.VerbTasksCancel, req, &dry))
	require.Equal(t, 5, dry.Matched)
	require.Equal(t, 0, dry.Cancelled)
	var acmeRefs []kv.Ref
	for _, id := range acme {
		acmeRefs = append(acmeRefs, kv.Ref{Tenant: "acme", ID: id})
	}
	require.Equal(t, acmeRefs, dry.Tasks)

	req.DryRun = false
	var done admin.BatchCancelReply
	require.NoError(t, b.call(t, admin.VerbTasksCancel, req, &done))
	require.Equal(t, 5, done.Cancelled)
	for _, id := range acme {
		rec, _, err := b.Client.Store().Get(context.Background(), kv.Ref{Tenant: "acme", ID: id})
		require.NoError(t, err)
		require.Equal(t, kv.StateCancelled, rec.State)
	}
	for _, ref := range []kv.Ref{{Tenant: "globex", ID: other}, {Tenant: "acme", ID: report}} {
		rec, err := b.Client.Get(context.Background(), ref.Tenant, ref.ID)
		require.NoError(t, err)
		require.Equal(t, kv.StateReady, rec.State, "outside the filter")
	}
}

func TestAdminStatsAndWorkers(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	// Two tasks whose records their claims write, one recorded at submit,
	// and a delayed one of the same priority: its PENDING record is bound
	// to its schedule, not to a message of the bucket (red when every
	// unfinished record of the priority is taken for one of its messages).
	for i := range 3 {
		b.Submit(t, ax.TaskSpec{ID: []string{"", "", "own-id"}[i], Type: "email", Priority: ax.P2})
	}
	b.Submit(t, ax.TaskSpec{ID: "later", Type: "email", Priority: ax.P2, Delay: time.Hour})
	var stats admin.StatsReply
	require.NoError(t, b.call(t, admin.VerbStats, admin.StatsRequest{Window: "1m"}, &stats))
	require.Len(t, stats.Buckets, 5)
	require.Equal(t, uint64(3), stats.Buckets[2].Depth)
	require.Equal(t, uint64(2), stats.Buckets[2].Unrecorded)
	require.Equal(t, "AX_P2", stats.Buckets[2].Stream)
	require.Positive(t, stats.Buckets[2].Capacity)
	require.InDelta(t, 2.0/60, stats.Buckets[2].SubmittedRate, 1e-9, "records created in the window")
	require.Equal(t, 3, stats.States[kv.StateReady], "the READY record and the two waiting without one")
	require.Equal(t, 1, stats.States[kv.StatePending])
	require.Equal(t, 2, stats.Records)
	require.Zero(t, stats.DLQ)

	var workers admin.WorkersReply
	require.NoError(t, b.call(t, admin.VerbWorkers, nil, &workers))
	require.NotNil(t, workers.Workers)
}

func TestAdminDLQListEmptyAndFiltered(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	var list admin.DLQListReply
	require.NoError(t, b.call(t, admin.VerbDLQList, admin.DLQListRequest{Filter: admin.Filter{Type: "email"}}, &list))
	require.Empty(t, list.Letters)
	require.Zero(t, list.Total)
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// finished writes a task of type typ that ran for took and ended in state
// (SUCCEEDED or DEAD) after attempts attempts; timedOut makes its first
// failure a timeout.
func (b *adminBundle) finished(t *testing.T, typ string, took time.Duration, state kv.State, attempts int, timedOut bool) {
	t.Helper()
	ctx := context.Background()
	store := b.Client.Store()
	id := b.Submit(t, ax.TaskSpec{ID: nuid.Next(), Type: typ, Timeout: 10 * time.Second}) // recorded at submit
	rec, rev, err := store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
	require.NoError(t, err)
	started := time.Now().Add(-took)
	for attempt := 1; attempt <= attempts; attempt++ {
		rec, rev, err = store.Apply(ctx, rec, rev, kv.StateRunning, kv.Actor{Worker: "w", Action: "claim"}, func(r *kv.Record) error {
			r.Attempt, r.StartedAt = attempt, &started
			return nil
		})
		require.NoError(t, err)
		if attempt == attempts {
			break
		}
		failure := kv.Actor{Worker: "w", Action: "retry", Error: "boom"}
		if timedOut && attempt == 1 {
			// Counted by the flag, not by the text.
			failure.Error, failure.TimedOut = "attempt ended: context deadline exceeded", true
		}
		rec, rev, err = store.Apply(ctx, rec, rev, kv.StateRetrying, failure, nil)
		require.NoError(t, err)
	}
	_, _, err = store.Apply(ctx, rec, rev, state, kv.Actor{Worker: "w", Action: "complete"}, func(r *kv.Record) error {
		finished := started.Add(took)
		r.FinishedAt = &finished
		return nil
	})
	require.NoError(t, err)
}

// Stats per type: counts, run-time percentiles and the timeout they
// recommend, next to the timeout the tasks carried.
func TestAdminStatsPerType(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	for i := range 10 {
		b.finished(t, "report", time.Duration(i+1)*400*time.Millisecond, kv.StateSucceeded, 1, false) // 0.4 .. 4 s
	}
	b.finished(t, "email", 50*time.Millisecond, kv.StateSucceeded, 2, true)
	b.finished(t, "email", 80*time.Millisecond, kv.StateDead, 3, false)
	b.Submit(t, ax.TaskSpec{Type: "waiting"}) // not finished: not in the types

	var stats admin.StatsReply
	require.NoError(t, b.call(t, admin.VerbStats, admin.StatsRequest{Window: "1m"}, &stats))
	require.Len(t, stats.Types, 2)
	email, report := stats.Types[0], stats.Types[1]
	require.Equal(t, "email", email.Type, "sorted by type")
	require.Equal(t, 1, email.Succeeded)
	require.Equal(t, 1, email.Dead)
	require.Equal(t, 2, email.Retried)
	require.Equal(t, 1, email.TimedOut)
	require.Equal(t, 2, email.Samples)
	require.Equal(t, kv.Duration(time.Second), email.RecommendedTimeout, "at least 1 s")

	require.Equal(t, "report", report.Type)
	require.Equal(t, 10, report.Succeeded)
	require.Zero(t, report.Dead+report.Retried+report.TimedOut)
	require.Equal(t, 10, report.Samples)
	require.Equal(t, kv.Duration(2*time.Second), report.P50)
	require.Equal(t, kv.Duration(4*time.Second), report.P99)
	require.Equal(t, kv.Duration(6*time.Second), report.RecommendedTimeout, "1.5 x 4 s")
	require.Equal(t, kv.Duration(10*time.Second), report.Timeout)
}

// Run serves until its context ends, then the service is gone: the one
// lifecycle shape of the worker and the leader.
func TestServiceRunServesUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	nc, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	svc, err := admin.New(context.Background(), js, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	api := admin.NewClient(nc, streams.Names{})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := api.Workers(context.Background())
		assert.NoError(c, err)
	}, 10*time.Second, 20*time.Millisecond, "Run serves")
	cancel()
	require.NoError(t, <-done)
	_, err = api.Workers(context.Background())
	require.ErrorIs(t, err, nats.ErrNoResponders, "stopped when its context ended")
}
