package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// startSecureLeader runs the leader loops as the scheduler user of
// docs/ax-permissions.conf until the test ends. cfg's zero fields take the
// leader's defaults.
func startSecureLeader(t *testing.T, m *secureMesh, cfg scheduler.Config) {
	t.Helper()
	sc := connectAs(t, m.srv, "scheduler")
	cfg.Logger = zaptest.NewLogger(t)
	cfg.LeaseTTL, cfg.RenewEvery = 2*time.Second, 500*time.Millisecond
	l, err := scheduler.New(context.Background(), sc.js, &cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, l.Leading, 30*time.Second, 20*time.Millisecond, "the leader is elected")
}

// ranTasks collects the tasks the mesh's "echo" handler ran, by id.
type ranTasks struct {
	mu   sync.Mutex
	byID map[string]ranTask
}

type ranTask struct {
	task *worker.Task
	at   time.Time
}

func collectRan(t *testing.T, m *secureMesh) *ranTasks {
	r := &ranTasks{byID: map[string]ranTask{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case task := <-m.ran:
				r.mu.Lock()
				r.byID[task.ID] = ranTask{task: task, at: time.Now()}
				r.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *ranTasks) get(id string) (ranTask, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt, ok := r.byID[id]
	return rt, ok
}

func (r *ranTasks) all() []ranTask {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ranTask, 0, len(r.byID))
	for _, rt := range r.byID {
		out = append(out, rt)
	}
	return out
}

// serverActedHeaders are the headers nats-server (v2.15.2: stream.go,
// scheduler.go, msgtrace.go) acts on when a message carrying them is
// stored, with values that would act: a schedule's source, target, TTL,
// rollup and time zone, the schedule itself and its purge, per-message
// TTLs, rollups, the expected-state checks, counters and batches; and one
// spelled in lower case. (A message with Nats-Trace-Dest is never
// answered: the producer may not publish the trace. streams'
// TestKeptHeaders covers every Nats- header.)
var serverActedHeaders = []struct{ name, value string }{
	{"Nats-Schedule-Source", "ax.delayed.globex.victim"},
	{"Nats-Schedule-Target", "ax.due.globex.victim"},
	{"Nats-Schedule-TTL", "5s"},
	{"Nats-Schedule-Rollup", "sub"},
	{"Nats-Schedule-Time-Zone", "Europe/Amsterdam"},
	{"Nats-Schedule", "@at 2030-01-01T00:00:00Z"},
	{"Nats-Scheduler", "ax.delayed.globex.victim"},
	{"Nats-Schedule-Next", "purge"},
	{"Nats-TTL", "1s"},
	{"Nats-Rollup", "all"},
	{"Nats-Expected-Stream", "AX_P1"},
	{"Nats-Expected-Last-Sequence", "0"},
	{"Nats-Expected-Last-Subject-Sequence", "0"},
	{"Nats-Expected-Last-Subject-Sequence-Subject", "ax.delayed.globex.victim"},
	{"Nats-Expected-Last-Msg-Id", "victim"},
	{"Nats-Incr", "1"},
	{"Nats-Batch-Id", "b1"},
	{"nats-schedule-source", "ax.delayed.globex.victim"},
}

// Issue 23.2: a producer's message is read through an allow-list. Every
// header the server acts on is tried, as producer-acme, on a delayed task
// and on an immediate one: each is refused at submit, or its task runs at
// its time with its own payload, and none of ax's writes made from it (the
// schedule in AX_DELAYED, the released copy, the dead letter) carries the
// header or any other header outside the wire contract. At 9b723bb acme's
// delayed task with Nats-Schedule-Source ran with globex's payload, and the
// headers AX_DELAYED refuses made the reconciler release tasks early.
func TestProducerHeadersNeverReachAxWrites(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, nil)
	ran := collectRan(t, m)
	startSecureLeader(t, m, scheduler.Config{SweepInterval: 100 * time.Millisecond, ReconcileGrace: time.Second,
		ReconcileRecheck: 2 * time.Second, AgingThreshold: -1})
	ctx := context.Background()
	acme := connectAs(t, m.srv, "producer-acme")
	globex := connectAs(t, m.srv, "producer-globex")
	operator := connectAs(t, m.srv, "operator")

	start := time.Now()
	victimAt := start.Add(8 * time.Second)
	submit(t, globex, "ax.submit.p1.globex.echo.victim", "victim", []byte("globex-secret"),
		map[string]string{streams.HeaderRunAt: victimAt.UTC().Format(time.RFC3339Nano)})
	waitState(t, operator, "victim", kv.StatePending)

	// Three tasks per header: one due soon (its released copy is what the
	// handler sees), one due in an hour (its schedule is read in
	// AX_DELAYED) and an immediate one with an invalid option (its dead
	// letter).
	soonAt := time.Now().Add(4 * time.Second)
	laterAt := time.Now().Add(time.Hour)
	type tried struct{ name, value, soon, later, dead string }
	var accepted []tried
	for i, h := range serverActedHeaders {
		try := tried{name: h.name, value: h.value}
		for _, c := range []struct {
			id   *string
			name string
			hdrs map[string]string
		}{
			{&try.soon, fmt.Sprintf("soon-%d", i), map[string]string{streams.HeaderRunAt: soonAt.UTC().Format(time.RFC3339Nano)}},
			{&try.later, fmt.Sprintf("later-%d", i), map[string]string{streams.HeaderRunAt: laterAt.UTC().Format(time.RFC3339Nano)}},
			{&try.dead, fmt.Sprintf("dead-%d", i), map[string]string{streams.HeaderTimeout: "not-a-duration"}},
		} {
			msg := nats.NewMsg("ax.submit.p1.acme.echo." + c.name)
			msg.Data = []byte("acme-own")
			msg.Header.Set(streams.HeaderMsgID, c.name)
			for k, v := range c.hdrs {
				msg.Header.Set(k, v)
			}
			msg.Header[h.name] = []string{h.value}
			if _, err := acme.js.PublishMsg(ctx, msg); err != nil {
				t.Logf("%s: %s refused at submit: %v", h.name, c.name, err)
				continue
			}
			*c.id = c.name
		}
		accepted = append(accepted, try)
	}

	// ax's own headers on each of its writes; every other header must be
	// an "Ax-" one of the wire contract, and none may be the producer's.
	onlyContract := func(t *testing.T, what string, hdr nats.Header, own ...string) {
		t.Helper()
		for name := range hdr {
			require.True(t, strings.HasPrefix(name, "Ax-") || containsString(own, name),
				"%s carries header %q (%q), outside the wire contract", what, name, hdr[name])
		}
		for _, h := range serverActedHeaders {
			for _, v := range hdr[h.name] {
				require.NotEqual(t, h.value, v, "%s carries the producer's %s", what, h.name)
			}
		}
	}
	for _, try := range accepted {
		t.Run(try.name, func(t *testing.T) {
			if try.later != "" {
				waitState(t, operator, try.later, kv.StatePending)
				sched := storedMsg(t, m.control, "AX_DELAYED", map[string]any{"last_by_subj": "ax.delayed.acme." + try.later})
				onlyContract(t, "the schedule", sched.Header, streams.HeaderSchedule, streams.HeaderScheduleTarget, "Nats-Rollup")
				require.Equal(t, "ax.due.acme."+try.later, sched.Header.Get(streams.HeaderScheduleTarget))
				require.Equal(t, []string{"sub"}, sched.Header["Nats-Rollup"], "the rollup the server adds to a schedule")
				var reply admin.TaskReply
				require.NoError(t, callAdmin(operator, admin.VerbTaskCancel, admin.TaskRequest{ID: try.later}, &reply))
			}
			if try.dead != "" {
				rec := waitState(t, operator, try.dead, kv.StateDead)
				require.Contains(t, rec.LastError, streams.HeaderTimeout)
				letter := storedMsg(t, m.control, "AX_DLQ", map[string]any{"seq": rec.DLQSeq})
				onlyContract(t, "the dead letter", letter.Header, streams.HeaderMsgID)
			}
			if try.soon != "" {
				rec := waitState(t, operator, try.soon, kv.StateSucceeded)
				require.False(t, rec.StartedAt.Before(soonAt), "%s started at %s, before its time %s", try.soon, rec.StartedAt, soonAt)
				rt, ok := ran.get(try.soon)
				require.True(t, ok, "%s ran", try.soon)
				require.Equal(t, "acme-own", string(rt.task.Payload), "%s ran with another payload", try.soon)
				onlyContract(t, "the released copy", rt.task.Headers, streams.HeaderMsgID)
			}
		})
	}

	// The victim ran at its time as globex's; no acme task ever saw its payload.
	rec := waitState(t, operator, "victim", kv.StateSucceeded)
	require.False(t, rec.StartedAt.Before(victimAt))
	for _, rt := range ran.all() {
		if rt.task.Tenant != "globex" {
			require.NotEqual(t, "globex-secret", string(rt.task.Payload), "acme's task %s ran with globex's payload", rt.task.ID)
		}
	}
}

// storedMsg reads a message as stored, headers included, through the
// stream's message API (a direct get would add headers of its own).
func storedMsg(t *testing.T, rc *roleConn, stream string, req map[string]any) *nats.Msg {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	reply, err := rc.nc.Request("$JS.API.STREAM.MSG.GET."+stream, body, 10*time.Second)
	require.NoError(t, err)
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	require.NoError(t, json.Unmarshal(reply.Data, &resp))
	require.Nil(t, resp.Error, "get %s %v", stream, req)
	require.NotNil(t, resp.Message)
	msg := &nats.Msg{Subject: resp.Message.Subject, Data: resp.Message.Data, Header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		msg.Header, err = nats.DecodeHeadersMsg(resp.Message.Header)
		require.NoError(t, err)
	}
	return msg
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// blockDelayedMoves takes "ax.delayed.>" from AX_DELAYED's subjects (as the
// scheduler, the one role that may change streams), so that a worker's
// move of a raw delayed task finds no stream; the returned function puts
// the subject back.
func blockDelayedMoves(t *testing.T, m *secureMesh) func() {
	t.Helper()
	ctx := context.Background()
	s, err := m.control.js.Stream(ctx, "AX_DELAYED")
	require.NoError(t, err)
	orig := s.CachedInfo().Config
	blocked := orig
	blocked.Subjects = []string{"ax.due.>"}
	_, err = m.control.js.UpdateStream(ctx, blocked)
	require.NoError(t, err)
	var once sync.Once
	restore := func() {
		once.Do(func() {
			_, err := m.control.js.UpdateStream(ctx, orig)
			require.NoError(t, err)
		})
	}
	t.Cleanup(restore)
	return restore
}

// Issue 23.3: while AX_DELAYED refuses the worker's move of a raw delayed
// task for longer than the reconcile grace, nothing is released early. A
// task whose move succeeds once AX_DELAYED is back runs at its time from
// its schedule; one whose run time comes during the outage runs then, from
// its message. At 9b723bb the reconciler took the message in the bucket
// for a stale copy and re-published it as released: both ran about a grace
// after their submit.
func TestDelayedTaskNeverReleasedEarly(t *testing.T) {
	m := startSecureMesh(t, nil)
	startSecureLeader(t, m, scheduler.Config{SweepInterval: 100 * time.Millisecond, ReconcileGrace: time.Second,
		ReconcileRecheck: 2 * time.Second, AgingThreshold: -1})
	acme := connectAs(t, m.srv, "producer-acme")
	operator := connectAs(t, m.srv, "operator")
	restore := blockDelayedMoves(t, m)

	start := time.Now()
	during := start.Add(4 * time.Second) // due during the outage
	after := start.Add(8 * time.Second)  // due after it
	submit(t, acme, "ax.submit.p2.acme.echo.during", "during", []byte("d"),
		map[string]string{streams.HeaderRunAt: during.UTC().Format(time.RFC3339Nano)})
	submit(t, acme, "ax.submit.p2.acme.echo.after", "after", []byte("a"),
		map[string]string{streams.HeaderRunAt: after.UTC().Format(time.RFC3339Nano)})

	// The outage lasts past "during"'s run time: several graces.
	notBefore := func(id string, at time.Time) {
		var reply admin.TaskReply
		if callAdmin(operator, admin.VerbTaskGet, admin.TaskRequest{ID: id}, &reply) != nil || reply.Task == nil {
			return
		}
		if time.Now().Before(at.Add(-200 * time.Millisecond)) {
			require.Contains(t, []kv.State{kv.StatePending}, reply.Task.State,
				"%s is %s %s before its run time", id, reply.Task.State, time.Until(at).Round(time.Millisecond))
		}
	}
	for time.Now().Before(during.Add(2 * time.Second)) {
		notBefore("during", during)
		notBefore("after", after)
		time.Sleep(100 * time.Millisecond)
	}
	restore()
	for time.Now().Before(after) {
		notBefore("after", after)
		time.Sleep(100 * time.Millisecond)
	}
	for id, at := range map[string]time.Time{"during": during, "after": after} {
		rec := waitState(t, operator, id, kv.StateSucceeded)
		require.False(t, rec.StartedAt.Before(at), "%s started at %s, before its run time %s", id, rec.StartedAt, at)
	}
}

// Issue 23.3: a delayed task runs at its time or is refused at submit:
// whatever a bucket accepts fits AX_DELAYED and the server's max_payload
// with ax's headers. A message over the bucket's limit is refused at
// submit; one that fits the bucket but leaves no room for ax's headers
// ends DEAD at once with the reason; one that leaves room runs at its
// time. At 9b723bb (bucket MaxMsgSize 1 MiB, AX_DELAYED 1 MiB + 64 KiB,
// max_payload 1 MiB) the first was accepted and stayed PENDING forever,
// the second ran about a grace after its submit.
func TestDelayedTaskSizeAtTheLimits(t *testing.T) {
	t.Parallel()
	m := startSecureMesh(t, nil)
	startSecureLeader(t, m, scheduler.Config{SweepInterval: 100 * time.Millisecond, ReconcileGrace: time.Second,
		ReconcileRecheck: 2 * time.Second, AgingThreshold: -1})
	ctx := context.Background()
	acme := connectAs(t, m.srv, "producer-acme")
	operator := connectAs(t, m.srv, "operator")
	maxPayload := int(acme.nc.MaxPayload())

	// The limits hold against the server: every stream a task is written
	// to takes at most max_payload.
	streamMax := map[string]int{}
	for _, name := range []string{"AX_P2", "AX_DELAYED", "AX_DLQ"} {
		s, err := m.control.js.Stream(ctx, name)
		require.NoError(t, err)
		streamMax[name] = int(s.CachedInfo().Config.MaxMsgSize)
		require.Positive(t, streamMax[name])
		require.LessOrEqual(t, streamMax[name], maxPayload, "%s takes messages the server refuses", name)
	}
	bucketMax := streamMax["AX_P2"]
	require.GreaterOrEqual(t, streamMax["AX_DELAYED"], bucketMax+streams.HeaderRoom)

	runAt := time.Now().Add(3 * time.Second)
	delayedMsg := func(id string, size int, runAt time.Time) *nats.Msg {
		msg := nats.NewMsg("ax.submit.p2.acme.echo." + id)
		msg.Header.Set(streams.HeaderMsgID, id)
		msg.Header.Set(streams.HeaderRunAt, runAt.UTC().Format(time.RFC3339Nano))
		hdrLen := len("NATS/1.0\r\n\r\n")
		for k, vs := range msg.Header {
			for _, v := range vs {
				hdrLen += len(k) + len(": \r\n") + len(v)
			}
		}
		msg.Data = make([]byte, size-hdrLen)
		return msg
	}

	// Over the bucket's limit (at 9b723bb: within it, and stranded).
	_, err := acme.js.PublishMsg(ctx, delayedMsg("too-big", min(maxPayload, bucketMax+streams.HeaderRoom)-100, runAt))
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr) || errors.Is(err, nats.ErrMaxPayload), "refused at submit: %v", err)

	// Within it, but without room for ax's headers: dead at first sight,
	// not at its run time (in an hour).
	_, err = acme.js.PublishMsg(ctx, delayedMsg("no-room", bucketMax-10, time.Now().Add(time.Hour)))
	require.NoError(t, err)
	// With room.
	_, err = acme.js.PublishMsg(ctx, delayedMsg("room", bucketMax-streams.TaskRoom, runAt))
	require.NoError(t, err)

	rec := waitState(t, operator, "no-room", kv.StateDead)
	require.Contains(t, rec.LastError, "too large")
	for _, move := range rec.Trail {
		require.NotEqual(t, kv.StateSucceeded, move.To)
	}
	rec = waitState(t, operator, "room", kv.StateSucceeded)
	require.False(t, rec.StartedAt.Before(runAt), "started at %s, before its run time %s", rec.StartedAt, runAt)
}
