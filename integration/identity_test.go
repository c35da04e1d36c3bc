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

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file check that a task's identity holds under
// operator verbs, lost compare-and-sets, duplicate submits and forged
// messages: every accepted task ends SUCCEEDED, CANCELLED or DEAD, and runs
// at most once to success. They failed at 54cd21a where named.

// runLog counts the runs of each task, and the payloads they saw.
type runLog struct {
	mu       sync.Mutex
	runs     map[string]int
	payloads map[string][]string
	active   map[string]int
	overlaps int
	// successes counts the runs whose handler returned nil.
	successes map[string]int
}

func newRunLog() *runLog {
	return &runLog{runs: map[string]int{}, payloads: map[string][]string{}, active: map[string]int{}, successes: map[string]int{}}
}

// logKey names a task in the log: its id for the default tenant's tasks
// (the Go client's default), "<tenant>/<id>" for another tenant's (a task
// id belongs to its tenant).
func logKey(task *worker.Task) string {
	if task.Tenant == ax.DefaultTenant {
		return task.ID
	}
	return task.Tenant + "/" + task.ID
}

func (l *runLog) begin(task *worker.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := logKey(task)
	l.runs[key]++
	l.payloads[key] = append(l.payloads[key], string(task.Payload))
	l.active[key]++
	if l.active[key] > 1 {
		l.overlaps++
	}
}

func (l *runLog) end(task *worker.Task, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := logKey(task)
	l.active[key]--
	if err == nil {
		l.successes[key]++
	}
}

func (l *runLog) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[id]
}

// identityArgs steer the "ident" handler: it sleeps SleepMS, and fails
// attempt FailAttempt (RetryAfter RetryMS, or permanently if Permanent).
type identityArgs struct {
	SleepMS     int  `json:"sleep_ms"`
	FailAttempt int  `json:"fail_attempt"`
	RetryMS     int  `json:"retry_ms"`
	Permanent   bool `json:"permanent"`
}

type meshBundle struct {
	dep    *axtest.Bundle
	srv    *natstest.Server
	js     jetstream.JetStream
	nc     *nats.Conn
	client *ax.Client
	api    *admin.Client
	store  *kv.Store
	log    *runLog
	reg    *worker.Registry
}

// setupMesh runs a server, the management API and a leader (aging off);
// the worker is started by startWorker, so that a test can act on tasks no
// worker has taken yet.
func setupMesh(t *testing.T) *meshBundle {
	t.Helper()
	return setupMeshWith(t, kv.StoreConfig{})
}

// setupMeshWith is setupMesh with the management API's record store
// configured by store (its retention of terminal records, for example).
func setupMeshWith(t *testing.T, store kv.StoreConfig) *meshBundle {
	t.Helper()
	return setupMeshAging(t, store, -1)
}

// setupMeshAging is setupMeshWith with the leader's aging threshold (-1:
// off).
func setupMeshAging(t *testing.T, store kv.StoreConfig, aging time.Duration) *meshBundle {
	t.Helper()
	scfg := &streams.Config{AckWait: 5 * time.Second}
	if store.Retention > 0 && store.Retention < streams.DefaultDuplicates {
		scfg.Duplicates = store.Retention // a retention may not be shorter than the de-duplication window
	}
	dep := axtest.Setup(t, axtest.Options{Streams: scfg})
	api := dep.StartAdmin(t, &admin.Config{Store: store})
	dep.StartLeader(t, scheduler.Config{AgingThreshold: aging, AckWait: 5 * time.Second, PausedRecheck: 200 * time.Millisecond})
	b := &meshBundle{dep: dep, srv: dep.Server, js: dep.JS, nc: dep.NC, client: dep.Client, api: api,
		store: dep.Store, log: newRunLog(), reg: worker.NewRegistry()}
	require.NoError(t, worker.HandleJSON(b.reg, "ident", func(ctx context.Context, task *worker.Task, args identityArgs) (err error) {
		b.log.begin(task)
		defer func() { b.log.end(task, err) }()
		select {
		case <-time.After(time.Duration(args.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if task.Attempt == args.FailAttempt {
			if args.Permanent {
				return worker.Permanent(errors.New("told to fail"))
			}
			return worker.RetryAfter(time.Duration(args.RetryMS)*time.Millisecond, errors.New("told to fail once"))
		}
		return nil
	}, nil))
	return b
}

// startWorker starts a worker on its own connection; it stops at the end
// of the test, or when the returned function is called.
func (b *meshBundle) startWorker(t *testing.T) (stop func()) {
	t.Helper()
	w, _ := b.dep.StartWorker(t, worker.Config{Registry: b.reg, Concurrency: 8, AckWait: 5 * time.Second,
		GracePeriod: time.Second, DefaultMaxAttempts: 3})
	return func() { axtest.Stop(t, w) }
}

func (b *meshBundle) submit(t *testing.T, task ax.TaskSpec) string {
	t.Helper()
	if task.Type == "" {
		task.Type = "ident"
	}
	info, err := b.client.Submit(context.Background(), task)
	require.NoError(t, err)
	return info.ID
}

func (b *meshBundle) call(verb string, req, resp any) error {
	return axtest.Call(b.api, verb, req, resp)
}

func (b *meshBundle) get(t *testing.T, id string) *kv.Record {
	t.Helper()
	rec, _, err := storeGet(context.Background(), b.store, id)
	require.NoError(t, err)
	return rec
}

func (b *meshBundle) waitState(t *testing.T, id string, within time.Duration, states ...kv.State) *kv.Record {
	t.Helper()
	read := func(ctx context.Context, id string) (*kv.Record, error) {
		rec, _, err := storeGet(ctx, b.store, id)
		return rec, err
	}
	return axtest.WaitState(t, read, id, within, states...)
}

// settled waits until task id is SUCCEEDED, CANCELLED or DEAD, resuming it
// if it is PAUSED, and returns its record.
func (b *meshBundle) settled(t *testing.T, id string, within time.Duration) *kv.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec := b.get(t, id)
		switch {
		case rec.State.Terminal():
			return rec
		case rec.State == kv.StatePaused:
			_ = b.call(admin.VerbTaskResume, admin.TaskRequest{ID: id, Tenant: rec.Tenant}, nil)
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s stuck in %s after %s; trail: %s", id, rec.State, within, trailOf(rec))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func trailOf(rec *kv.Record) string {
	out, _ := json.Marshal(rec.Trail)
	return string(out)
}

func payload(t *testing.T, args identityArgs) []byte {
	t.Helper()
	out, err := json.Marshal(args)
	require.NoError(t, err)
	return out
}

// Issue 11.1: pause, then resume, a delayed task: it runs at its time.
// At 54cd21a it stayed READY forever with no message anywhere.
func TestResumedDelayedTaskRuns(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	b.startWorker(t)
	id := b.submit(t, ax.TaskSpec{ID: "v", Payload: payload(t, identityArgs{}), Delay: 1500 * time.Millisecond})
	require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: id}, nil))
	require.NoError(t, b.call(admin.VerbTaskResume, admin.TaskRequest{ID: id}, nil))
	rec := b.waitState(t, id, 20*time.Second, kv.StateSucceeded)
	require.Equal(t, 1, b.log.count(id))
	require.Equal(t, 1, rec.Attempt)
}

// Issue 11.1: every operator verb against every state leaves the task in
// a state that something moves on: each ends SUCCEEDED, CANCELLED or DEAD,
// and none succeeds twice.
func TestOperatorVerbsNeverStrandATask(t *testing.T) {
	t.Parallel()
	verbs := []string{"pause", "resume", "reprioritize", "cancel", "replay"}
	act := func(b *meshBundle, verb, id string) error {
		switch verb {
		case "pause":
			return b.call(admin.VerbTaskPause, admin.TaskRequest{ID: id}, nil)
		case "resume":
			return b.call(admin.VerbTaskResume, admin.TaskRequest{ID: id}, nil)
		case "reprioritize":
			return b.call(admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: 1}, nil)
		case "cancel":
			return b.call(admin.VerbTaskCancel, admin.TaskRequest{ID: id}, nil)
		default:
			return b.call(admin.VerbDLQReplay, admin.DLQReplayRequest{ID: id}, nil)
		}
	}
	type state struct {
		name        string
		workerFirst bool // the worker runs before the verbs (else it starts after them)
		args        identityArgs
		delay       time.Duration
		prepare     func(t *testing.T, b *meshBundle, id string)
	}
	states := []state{
		{name: "PENDING", delay: 2 * time.Second},
		{name: "READY"},
		{name: "PAUSED", prepare: func(t *testing.T, b *meshBundle, id string) {
			require.NoError(t, b.call(admin.VerbTaskPause, admin.TaskRequest{ID: id}, nil))
		}},
		{name: "RETRYING", workerFirst: true, args: identityArgs{FailAttempt: 1, RetryMS: 3000}},
		{name: "RUNNING", workerFirst: true, args: identityArgs{SleepMS: 2000}},
		{name: "DEAD", workerFirst: true, args: identityArgs{FailAttempt: 1, Permanent: true}},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := setupMesh(t)
			if st.workerFirst {
				b.startWorker(t)
			}
			ids := map[string]string{}
			for _, verb := range verbs {
				ids[verb] = b.submit(t, ax.TaskSpec{ID: st.name + "-" + verb, Priority: ax.P3, Payload: payload(t, st.args), Delay: st.delay})
			}
			for _, verb := range verbs {
				id := ids[verb]
				if st.prepare != nil {
					st.prepare(t, b, id)
				}
				b.waitState(t, id, 20*time.Second, kv.State(st.name))
				err := act(b, verb, id)
				t.Logf("%s on %s: %v", verb, st.name, err)
			}
			if !st.workerFirst {
				b.startWorker(t)
			}
			for _, verb := range verbs {
				id := ids[verb]
				rec := b.settled(t, id, 30*time.Second)
				t.Logf("%s on %s ends %s after %d run(s)", verb, st.name, rec.State, b.log.count(id))
				b.log.mu.Lock()
				succeeded := b.log.successes[id]
				b.log.mu.Unlock()
				// A task runs to success at most once, and exactly once if
				// its record says SUCCEEDED (runs that failed on purpose
				// come on top).
				require.LessOrEqual(t, succeeded, 1, "%s on %s: successful runs", verb, st.name)
				require.Equal(t, rec.State == kv.StateSucceeded, succeeded == 1, "%s on %s: %s after %d successful run(s)", verb, st.name, rec.State, succeeded)
				if rec.State == kv.StateDead {
					require.NotEmpty(t, rec.LastError, "%s on %s: DEAD without a reason", verb, st.name)
				}
			}
			b.log.mu.Lock()
			require.Zero(t, b.log.overlaps, "overlapping runs")
			b.log.mu.Unlock()
		})
	}
}

// Issue 11.2: a copy left by a move that lost its compare-and-set, deleted
// after another move re-published the task, must not strand it. At
// 54cd21a the reprioritize's publish was de-duplicated onto the aging
// copy's id, and deleting that copy left the record READY at nothing.
func TestDeletedLosingCopyDoesNotStrandTask(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	id := b.submit(t, ax.TaskSpec{ID: "lost-cas", Priority: ax.P3, Payload: payload(t, identityArgs{})})
	// What aging publishes before its compare-and-set (the old copy id).
	msg := nats.NewMsg("ax.submit.p2.default.ident.lost-cas")
	msg.Data = payload(t, identityArgs{})
	msg.Header.Set(streams.HeaderTaskID, id)
	msg.Header.Set(streams.HeaderGen, "2")
	msg.Header.Set(streams.HeaderMsgID, id+":g2")
	agingCopy, err := b.js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	require.NoError(t, b.call(admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: 2}, nil))
	// Aging lost its compare-and-set and deletes its copy.
	p2, err := b.js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	_ = p2.DeleteMsg(ctx, agingCopy.Sequence)
	b.startWorker(t)
	b.waitState(t, id, 20*time.Second, kv.StateSucceeded)
	require.Equal(t, 1, b.log.count(id))
}

// Issue 12.1: one id submitted to two buckets is stored once, and a task
// whose id arrives raw in two buckets runs once. At 54cd21a the second
// message was stored and, when sequences collided, took over the live run.
func TestOneIDInTwoBucketsRunsOnce(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	args := payload(t, identityArgs{SleepMS: 1500})
	first, err := b.client.Submit(ctx, ax.TaskSpec{ID: "d1", Type: "ident", Priority: ax.P3, Payload: args})
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	second, err := b.client.Submit(ctx, ax.TaskSpec{ID: "d1", Type: "ident", Priority: ax.P1, Payload: args})
	require.NoError(t, err)
	require.True(t, second.Duplicate, "a second submit of an id is a duplicate")
	p1, err := b.js.Stream(ctx, "AX_P1")
	require.NoError(t, err)
	info, err := p1.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "the duplicate's message is not kept")

	// Raw publishes of one id into two buckets (sequence 1 in both).
	for _, subject := range []string{"ax.submit.p4.default.ident.d2", "ax.submit.p0.default.ident.d2"} {
		msg := nats.NewMsg(subject)
		msg.Data = args
		msg.Header.Set(streams.HeaderMsgID, "d2")
		_, err := b.js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	b.startWorker(t)
	b.waitState(t, "d1", 20*time.Second, kv.StateSucceeded)
	b.waitState(t, "d2", 20*time.Second, kv.StateSucceeded)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"AX_P0", "AX_P1", "AX_P3", "AX_P4"} {
			s, err := b.js.Stream(ctx, name)
			if !assert.NoError(c, err) {
				return
			}
			i, err := s.Info(ctx)
			if assert.NoError(c, err) {
				assert.Zero(c, i.State.Msgs, name)
			}
		}
	}, 20*time.Second, 50*time.Millisecond, "every message is settled")
	require.Equal(t, 1, b.log.count("d1"))
	require.Equal(t, 1, b.log.count("d2"))
	b.log.mu.Lock()
	require.Zero(t, b.log.overlaps)
	b.log.mu.Unlock()
}

// Issue 11.4: tasks published without a Nats-Msg-Id still run after their
// bucket is recreated (sequences start again at 1). At 54cd21a the new
// task got the old one's id, met its SUCCEEDED record and was acked unrun.
func TestFallbackIDsSurviveBucketRecreation(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	stop := b.startWorker(t)
	publish := func() {
		require.NoError(t, b.nc.Publish("ax.submit.p2.default.ident.raw", payload(t, identityArgs{})))
		require.NoError(t, b.nc.Flush())
	}
	publish()
	require.Eventually(t, func() bool { return b.total() == 1 }, 20*time.Second, 20*time.Millisecond)
	stop() // an operator recreating a bucket restarts its workers
	require.NoError(t, b.js.DeleteStream(ctx, "AX_P2"))
	natstest.Provision(t, b.js, &streams.Config{AckWait: 5 * time.Second})
	b.startWorker(t)
	publish()
	require.Eventually(t, func() bool { return b.total() == 2 }, 30*time.Second, 20*time.Millisecond,
		"the task published after the bucket was recreated runs")
}

func (b *meshBundle) total() int {
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	n := 0
	for _, c := range b.log.runs {
		n += c
	}
	return n
}

// Issue 13.1 (in part): a message of another tenant that names a task by
// Ax-Task-Id, with a generation far ahead, never runs as that task; the
// task runs once with its own payload. At 54cd21a the forged payload ran
// as the victim and the victim's message was acked away.
func TestForeignMessageCannotReplaceTask(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	real := payload(t, identityArgs{})
	_, err := b.client.Submit(ctx, ax.TaskSpec{ID: "victim", Type: "ident", Tenant: "tenantB", Priority: ax.P3, Payload: real})
	require.NoError(t, err)
	msg := nats.NewMsg("ax.submit.p0.tenantA.ident.x")
	msg.Data = []byte(`{"sleep_ms":1}`)
	msg.Header.Set(streams.HeaderTaskID, "victim")
	msg.Header.Set(streams.HeaderGen, "7")
	msg.Header.Set(streams.HeaderMsgID, "atk-1")
	_, err = b.js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	b.startWorker(t)
	rec := b.waitState(t, "victim", 20*time.Second, kv.StateSucceeded)
	require.Equal(t, "tenantB", rec.Tenant)
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	require.Equal(t, []string{string(real)}, b.log.payloads["tenantB/victim"], "the victim ran once, with its own payload")
	require.Equal(t, 1, b.log.runs["tenantB/victim"], fmt.Sprint(b.log.runs))
}

// Issue 17.8: a batch cancel covers queued raw-published tasks that no
// worker has seen (they have no record yet). At 54cd21a it answered "0
// match" for them, and they ran.
func TestBatchCancelCoversUnseenTasks(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	for i, id := range []string{"raw-1", "raw-2", ""} { // the last has no Nats-Msg-Id
		msg := nats.NewMsg(fmt.Sprintf("ax.submit.p%d.acme.ident.k%d", i, i))
		msg.Data = payload(t, identityArgs{})
		if id != "" {
			msg.Header.Set(streams.HeaderMsgID, id)
		}
		_, err := b.js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	other := b.submit(t, ax.TaskSpec{ID: "other-tenant", Tenant: "globex", Payload: payload(t, identityArgs{})})
	var reply admin.BatchCancelReply
	require.NoError(t, b.call(admin.VerbTasksCancel, admin.BatchCancelRequest{Filter: admin.Filter{Tenant: "acme"}}, &reply))
	require.Equal(t, 3, reply.Matched, "%+v", reply)
	require.Equal(t, 3, reply.Cancelled, "%+v", reply)
	b.startWorker(t)
	b.waitState(t, other, 20*time.Second, kv.StateSucceeded)
	require.Eventually(t, func() bool {
		for _, name := range []string{"AX_P0", "AX_P1", "AX_P2"} {
			s, err := b.js.Stream(ctx, name)
			if err != nil || s.CachedInfo().State.Msgs != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the cancelled messages are dropped")
	require.Equal(t, 1, b.total(), "only the other tenant's task ran")
}

// Issue 13.1: a producer that publishes tasks under the ids of a cron job's
// future fires ("cron-<name>-<unix>") cannot replace them: the ids carry the
// job's secret. At 54cd21a the real fire was de-duplicated onto the
// producer's message, which ran as the cron task.
func TestCronFiresCannotBePrePublished(t *testing.T) {
	t.Parallel()
	b := setupMesh(t)
	ctx := context.Background()
	real := payload(t, identityArgs{SleepMS: 1})
	_, err := b.client.AddCron(ctx, ax.CronJob{Name: "c1", Spec: "@every 1s", Task: ax.TaskSpec{Type: "ident", Payload: real}})
	require.NoError(t, err)
	now := time.Now().Unix()
	for sec := now; sec < now+6; sec++ {
		id := fmt.Sprintf("cron-c1-%d", sec)
		msg := nats.NewMsg("ax.submit.p2.default.ident." + id)
		msg.Data = []byte(`{"sleep_ms":2}`)
		msg.Header.Set(streams.HeaderMsgID, id)
		_, err := b.js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	b.startWorker(t)
	var replaced []string
	require.Eventually(t, func() bool {
		b.log.mu.Lock()
		defer b.log.mu.Unlock()
		fires := 0
		replaced = nil
		for id, payloads := range b.log.payloads {
			if strings.HasPrefix(id, "cron-c1-") && len(strings.Split(id, "-")) == 4 { // the job's own ids
				fires++
				if len(payloads) != 1 || payloads[0] != string(real) {
					replaced = append(replaced, id)
				}
			}
		}
		return fires >= 3
	}, 30*time.Second, 100*time.Millisecond)
	require.Empty(t, replaced, "cron tasks that ran with the producer's payload")
	_, err = b.client.AddCron(ctx, ax.CronJob{Name: "c1", Spec: "@every 1s", Task: ax.TaskSpec{Type: "ident", Payload: real}})
	require.NoError(t, err)
	jobs, err := b.client.ListCron(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Len(t, jobs[0].Secret, 16, "replacing a job keeps its secret")
}
