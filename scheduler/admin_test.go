package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
)

type adminBundle struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	client *scheduler.Client
	api    *scheduler.AdminClient
}

// setupAdmin starts a server with ax provisioned, the management API and a
// submit client; no worker runs, so submitted tasks stay READY.
func setupAdmin(t *testing.T) *adminBundle { return setupAdminTB(t) }

func setupAdminTB(t testing.TB) *adminBundle {
	t.Helper()
	nc, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	admin, err := scheduler.NewAdmin(ctx, js, &scheduler.AdminConfig{Version: "1.2.3"})
	require.NoError(t, err)
	require.NoError(t, admin.Start(ctx))
	t.Cleanup(func() { _ = admin.Stop(ctx) })
	client, err := scheduler.NewClient(ctx, js, nil)
	require.NoError(t, err)
	return &adminBundle{nc: nc, js: js, client: client, api: scheduler.NewAdminClient(nc, streams.Names{})}
}

func (b *adminBundle) call(t *testing.T, verb string, req, resp any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.api.Call(ctx, verb, req, resp)
}

func (b *adminBundle) submit(t *testing.T, task scheduler.TaskSpec) string {
	t.Helper()
	info, err := b.client.Submit(context.Background(), task)
	require.NoError(t, err)
	return info.ID
}

func requireCode(t *testing.T, err error, code int, contains string) {
	t.Helper()
	require.ErrorIs(t, err, &scheduler.AdminError{Code: code})
	require.ErrorContains(t, err, contains)
}

func TestAdminIsAMicroServiceWithEveryVerb(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	subject, err := micro.ControlSubject(micro.InfoVerb, "ax", "")
	require.NoError(t, err)
	msg, err := b.nc.Request(subject, nil, 10*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, jsonUnmarshal(msg.Data, &info))
	require.Equal(t, "ax", info.Name)
	require.Equal(t, "1.2.3", info.Version)
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	for _, verb := range scheduler.Verbs() {
		require.Contains(t, subjects, "ax.admin."+verb)
	}
}

func TestAdminGetAndTrail(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	id := b.submit(t, scheduler.TaskSpec{Type: "email", Tenant: "acme", Priority: scheduler.P2})
	var got scheduler.TaskReply
	require.NoError(t, b.call(t, scheduler.VerbTaskGet, scheduler.TaskRequest{ID: id}, &got))
	require.Equal(t, kv.StateReady, got.Task.State)
	require.Equal(t, "acme", got.Task.Tenant)
	var trail scheduler.TrailReply
	require.NoError(t, b.call(t, scheduler.VerbTaskTrail, scheduler.TaskRequest{ID: id}, &trail))
	require.Len(t, trail.Trail, 1)
	require.Equal(t, "submit", trail.Trail[0].Action)
}

func TestAdminBadRequests(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	done := b.submit(t, scheduler.TaskSpec{Type: "email"})
	_, err := kvCancel(b, t, done)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, verb string
		req        any
		code       int
		contains   string
	}{
		{"unknown task", scheduler.VerbTaskGet, scheduler.TaskRequest{ID: "nope"}, 404, "unknown task"},
		{"missing id", scheduler.VerbTaskTrail, scheduler.TaskRequest{}, 400, `"id" is required`},
		{"bad id", scheduler.VerbTaskCancel, scheduler.TaskRequest{ID: "a.b"}, 400, "task id"},
		{"unknown field", scheduler.VerbTaskGet, map[string]any{"id": "x", "bogus": 1}, 400, "not valid JSON"},
		{"not json", scheduler.VerbTaskGet, "garbage", 400, "not valid JSON"},
		{"cancel terminal", scheduler.VerbTaskCancel, scheduler.TaskRequest{ID: done}, 409, "is CANCELLED: cancel applies only to"},
		{"pause unknown", scheduler.VerbTaskPause, scheduler.TaskRequest{ID: "ghost"}, 404, "--unseen"},
		{"resume not paused", scheduler.VerbTaskResume, scheduler.TaskRequest{ID: done}, 409, "resume applies only to"},
		{"bad priority", scheduler.VerbTaskReprioritize, scheduler.ReprioritizeRequest{ID: done, Priority: 7}, 400, "not 0..4"},
		{"reprioritize terminal", scheduler.VerbTaskReprioritize, scheduler.ReprioritizeRequest{ID: done, Priority: 1}, 409, "only a READY or PENDING task"},
		{"batch without filter", scheduler.VerbTasksCancel, scheduler.BatchCancelRequest{}, 400, "needs a filter"},
		{"batch bad state", scheduler.VerbTasksCancel, scheduler.BatchCancelRequest{Filter: scheduler.Filter{States: []kv.State{"DONE"}}}, 400, "unknown state"},
		{"batch terminal state", scheduler.VerbTasksCancel, scheduler.BatchCancelRequest{Filter: scheduler.Filter{States: []kv.State{kv.StateDead}}}, 400, "cannot be cancelled"},
		{"batch bad tenant", scheduler.VerbTasksCancel, scheduler.BatchCancelRequest{Filter: scheduler.Filter{Tenant: "a b"}}, 400, "bad filter"},
		{"dlq bad limit", scheduler.VerbDLQList, scheduler.DLQListRequest{Limit: -1}, 400, `"limit"`},
		{"replay nothing", scheduler.VerbDLQReplay, scheduler.DLQReplayRequest{}, 400, "needs"},
		{"replay both", scheduler.VerbDLQReplay, scheduler.DLQReplayRequest{ID: "x", Filter: scheduler.Filter{Type: "t"}}, 400, "either"},
		{"replay not dead", scheduler.VerbDLQReplay, scheduler.DLQReplayRequest{ID: done}, 409, "replay applies only to DEAD"},
		{"stats bad window", scheduler.VerbStats, scheduler.StatsRequest{Window: "soon"}, 400, "window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp map[string]any
			requireCode(t, b.call(t, tc.verb, tc.req, &resp), tc.code, tc.contains)
		})
	}
}

func kvCancel(b *adminBundle, t *testing.T, id string) (*scheduler.TaskReply, error) {
	var reply scheduler.TaskReply
	err := b.call(t, scheduler.VerbTaskCancel, scheduler.TaskRequest{ID: id}, &reply)
	return &reply, err
}

func TestAdminCancelWaitingAndUnseen(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	id := b.submit(t, scheduler.TaskSpec{Type: "email"})
	reply, err := kvCancel(b, t, id)
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, reply.Task.State)
	require.Equal(t, "cancel", reply.Task.LastMove().Action)
	require.NotNil(t, reply.Task.FinishedAt)

	var unseen scheduler.TaskReply
	require.NoError(t, b.call(t, scheduler.VerbTaskPause, scheduler.TaskRequest{ID: "raw-1", Unseen: true}, &unseen))
	require.True(t, unseen.Created)
	require.Equal(t, kv.StatePaused, unseen.Task.State)
}

func TestAdminPauseResumeRedispatches(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	id := b.submit(t, scheduler.TaskSpec{Type: "email", Payload: []byte("keep me"), Priority: scheduler.P1, Headers: map[string]string{"Ax-Trace": "t1"}})
	var paused scheduler.TaskReply
	require.NoError(t, b.call(t, scheduler.VerbTaskPause, scheduler.TaskRequest{ID: id}, &paused))
	require.Equal(t, kv.StatePaused, paused.Task.State)
	require.Equal(t, uint64(1), streamMsgs(t, b.js, "AX_P1"), "pause keeps the message")

	var resumed scheduler.TaskReply
	require.NoError(t, b.call(t, scheduler.VerbTaskResume, scheduler.TaskRequest{ID: id}, &resumed))
	require.True(t, resumed.Redispatched)
	require.Equal(t, kv.StateReady, resumed.Task.State)
	require.Equal(t, uint64(2), resumed.Task.Gen)
	require.Equal(t, uint64(1), streamMsgs(t, b.js, "AX_P1"), "the old copy is deleted")
	msg := getMsg(t, b.js, "AX_P1", resumed.Task.StreamSeq)
	require.Equal(t, "keep me", string(msg.Data))
	require.Equal(t, "2", msg.Header.Get(streams.HeaderGen))
	require.Equal(t, id, msg.Header.Get(streams.HeaderTaskID))
	require.Equal(t, "t1", msg.Header.Get("Ax-Trace"))
	require.True(t, strings.HasSuffix(msg.Subject, ".ctl"), "a control-plane copy: %s", msg.Subject)
	opts, err := streams.ParseCopyHeaders(msg.Header)
	require.NoError(t, err)
	require.Equal(t, id, opts.ID, "a worker reads the task id of the copy")
	var trail scheduler.TrailReply
	require.NoError(t, b.call(t, scheduler.VerbTaskTrail, scheduler.TaskRequest{ID: id}, &trail))
	var actions []string
	for _, m := range trail.Trail {
		actions = append(actions, m.Action)
	}
	require.Equal(t, []string{"submit", "pause", "resume"}, actions)
}

func TestAdminReprioritizeMovesBucket(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	id := b.submit(t, scheduler.TaskSpec{Type: "email", Payload: []byte("p"), Priority: scheduler.P4})
	var reply scheduler.TaskReply
	require.NoError(t, b.call(t, scheduler.VerbTaskReprioritize, scheduler.ReprioritizeRequest{ID: id, Priority: 0}, &reply))
	require.Equal(t, 0, reply.Task.Priority)
	require.Equal(t, uint64(2), reply.Task.Gen)
	require.Equal(t, "reprioritize", reply.Task.LastMove().Action)
	require.Equal(t, uint64(0), streamMsgs(t, b.js, "AX_P4"))
	require.Equal(t, uint64(1), streamMsgs(t, b.js, "AX_P0"))
	requireCode(t, b.call(t, scheduler.VerbTaskReprioritize, scheduler.ReprioritizeRequest{ID: id, Priority: 0}, &reply), 400, "already P0")
}

func TestAdminBatchCancel(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	var acme []string
	for i := range 5 {
		acme = append(acme, b.submit(t, scheduler.TaskSpec{ID: fmt.Sprintf("acme-%d", i), Type: "email", Tenant: "acme"}))
	}
	other := b.submit(t, scheduler.TaskSpec{Type: "email", Tenant: "globex"})
	report := b.submit(t, scheduler.TaskSpec{Type: "report", Tenant: "acme"})

	var dry scheduler.BatchCancelReply
	req := scheduler.BatchCancelRequest{Filter: scheduler.Filter{Type: "email", Tenant: "acme", States: []kv.State{kv.StateReady}}, DryRun: true}
	require.NoError(t, b.call(t, scheduler.VerbTasksCancel, req, &dry))
	require.Equal(t, 5, dry.Matched)
	require.Equal(t, 0, dry.Cancelled)
	require.Equal(t, acme, dry.IDs)

	req.DryRun = false
	var done scheduler.BatchCancelReply
	require.NoError(t, b.call(t, scheduler.VerbTasksCancel, req, &done))
	require.Equal(t, 5, done.Cancelled)
	for _, id := range acme {
		rec, _, err := b.client.Store().Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, kv.StateCancelled, rec.State)
	}
	for _, id := range []string{other, report} {
		rec, _, err := b.client.Store().Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, kv.StateReady, rec.State, "outside the filter")
	}
}

func TestAdminStatsAndWorkers(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	for range 3 {
		b.submit(t, scheduler.TaskSpec{Type: "email", Priority: scheduler.P2})
	}
	var stats scheduler.StatsReply
	require.NoError(t, b.call(t, scheduler.VerbStats, scheduler.StatsRequest{Window: "1m"}, &stats))
	require.Len(t, stats.Buckets, 5)
	require.Equal(t, uint64(3), stats.Buckets[2].Depth)
	require.Equal(t, "AX_P2", stats.Buckets[2].Stream)
	require.Positive(t, stats.Buckets[2].Capacity)
	require.InDelta(t, 3.0/60, stats.Buckets[2].SubmittedRate, 1e-9)
	require.Equal(t, 3, stats.States[kv.StateReady])
	require.Zero(t, stats.DLQ)

	var workers scheduler.WorkersReply
	require.NoError(t, b.call(t, scheduler.VerbWorkers, nil, &workers))
	require.NotNil(t, workers.Workers)
}

func TestAdminDLQListEmptyAndFiltered(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	var list scheduler.DLQListReply
	require.NoError(t, b.call(t, scheduler.VerbDLQList, scheduler.DLQListRequest{Filter: scheduler.Filter{Type: "email"}}, &list))
	require.Empty(t, list.Letters)
	require.Zero(t, list.Total)
}

func getMsg(t *testing.T, js jetstream.JetStream, stream string, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	require.NoError(t, err)
	msg, err := s.GetMsg(context.Background(), seq)
	require.NoError(t, err)
	return msg
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// finished writes a task of type typ that ran for took and ended in state
// (SUCCEEDED or DEAD) after attempts attempts; timedOut makes its first
// failure a timeout.
func (b *adminBundle) finished(t *testing.T, typ string, took time.Duration, state kv.State, attempts int, timedOut bool) {
	t.Helper()
	ctx := context.Background()
	store := b.client.Store()
	id := b.submit(t, scheduler.TaskSpec{Type: typ, Timeout: 10 * time.Second})
	rec, rev, err := store.Get(ctx, id)
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
	b.submit(t, scheduler.TaskSpec{Type: "waiting"}) // not finished: not in the types

	var stats scheduler.StatsReply
	require.NoError(t, b.call(t, scheduler.VerbStats, scheduler.StatsRequest{Window: "1m"}, &stats))
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
