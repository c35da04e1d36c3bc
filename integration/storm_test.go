package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// storm is the operator storm's cluster: one `ax server`, two `ax
// scheduler` processes (leader and standby, both serving the management
// API), probe workers, and what the storm did.
type storm struct {
	*mesh
	nc         *nats.Conn
	api        *admin.Client
	schedulers map[string]*process

	mu      sync.Mutex
	actions map[string]map[string]int // verb -> outcome ("ok", "409", "no answer", …) -> count (mu)
}

// Operator storm: tasks (some delayed, some failing once, some failing for
// good, priorities P0..P4 with aging on at a 1 s threshold) while operator
// scripts pause, resume, reprioritize, cancel and replay random tasks
// through the management API (every tenth action through the ax CLI),
// the leader is frozen (SIGSTOP past its lease TTL, then SIGCONT) and a
// worker is SIGKILLed and replaced. Then every paused task is resumed, and
// every task must end SUCCEEDED, CANCELLED or DEAD with a reason: none
// stuck or lost, no SUCCEEDED task without its effect, no two executions of
// a task overlapping and no second effect attempt that a failure does not
// explain.
//
// Fails at 2a2a6a4 (as at 54cd21a), 4 of 4 runs: 13, 8, 16 and 15 of
// 1,500 tasks stuck 60-90 s after the storm. Most are READY at attempt 0 with
// the trail submit (PENDING), pause, resume: a delayed task paused and
// resumed has no message left (issue 11 item 1); in the first run 3 more
// were RETRYING at attempt 1 for good after aging, claim and retry.
// Overlapping executions and unexplained effect attempts were 0 in all
// four.
func TestOperatorStorm(t *testing.T) {
	t.Parallel()
	s := startStorm(t)
	ids, doomed := s.submit(stormTasks)
	t.Logf("operator storm: %d tasks submitted, %d of them failing for good", len(ids), len(doomed))
	freezes, kills := s.rage(ids, doomed)
	final, resumed := s.settle(ids, stormSettle)
	s.report(ids, final, resumed, freezes, kills)
}

// rage runs the storm for stormFor: three operator scripts ([storm.operate])
// and the given scripts beside them, until the process faults
// ([storm.faults]) end; it returns the leader freezes and worker kills.
func (s *storm) rage(ids, doomed []string, scripts ...func(context.Context)) (freezes, kills int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { s.operate(ctx, ids, doomed, i) })
	}
	for _, script := range scripts {
		wg.Go(func() { script(ctx) })
	}
	freezes, kills = s.faults(stormFor)
	cancel()
	wg.Wait()
	return freezes, kills
}

// startStorm starts the server, the schedulers and three workers.
func startStorm(t *testing.T) *storm {
	t.Helper()
	port := freePort(t)
	m := &mesh{t: t, url: fmt.Sprintf("nats://127.0.0.1:%d", port), data: t.TempDir(), journal: t.TempDir(),
		workers: map[string]*process{}, deaths: map[string]time.Time{}, ackWait: faultAckWait}
	srv := startAx(t, "server", "--name", "storm", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data", m.data)
	m.dev = srv // the server, for the tests that freeze it
	require.Eventually(t, func() bool { return strings.Contains(srv.output(), "serving") }, 30*time.Second, 50*time.Millisecond)
	runAx(t, "provision", "--server", m.url, "--ack-wait", faultAckWait)
	s := &storm{mesh: m, schedulers: map[string]*process{}, actions: map[string]map[string]int{}}
	for _, id := range []string{"s1", "s2"} {
		s.schedulers[id] = startAx(t, "scheduler", "--server", m.url, "--scheduler-id", id, "--lease-ttl", "2s",
			"--aging-threshold", "1s", "--ack-wait", faultAckWait)
	}
	s.nc, m.js = connect(t, m.url)
	var err error
	m.client, err = ax.NewClient(context.Background(), m.js, nil)
	require.NoError(t, err)
	s.api = admin.NewClient(s.nc, streams.Names{})
	require.Eventually(t, func() bool { return s.leader() != "" }, 30*time.Second, 50*time.Millisecond, "no leader")
	for range 3 {
		m.spawn()
	}
	return s
}

// leader returns the id of the scheduler holding the leader lease, or "".
func (s *storm) leader() string { return leaderOf(s.js) }

// submit submits n probe tasks: 0.2-1.5 s each (three workers of 16 slots
// take about as long as the storm over the default 1,500), on P0..P4 and three
// tenants; a fifth delayed by up to 15 s, a tenth failing their first
// attempt, a twentieth failing for good (to be dead-lettered, and
// replayed), a twentieth lasting 3 s (to be cancelled while running). It
// returns the ids, and those of the tasks failing for good.
func (s *storm) submit(n int) (ids, doomed []string) {
	s.t.Helper()
	now := time.Now()
	tasks := make([]ax.TaskSpec, n)
	fails := make([]bool, n)
	for i := range tasks {
		ms := 200 + rand.IntN(1301)
		payload := fmt.Sprintf(`{"ms":%d}`, ms)
		task := ax.TaskSpec{Type: "probe", Priority: ax.PriorityOf(rand.IntN(5)), Tenant: fmt.Sprintf("t%d", i%3), MaxAttempts: 3}
		switch r := rand.IntN(20); {
		case r < 4:
			task.RunAt = now.Add(time.Duration(1+rand.IntN(15)) * time.Second)
		case r < 6:
			payload = fmt.Sprintf(`{"ms":%d,"fail":1}`, ms)
		case r < 7:
			payload = fmt.Sprintf(`{"ms":%d,"fail":99,"permanent":true}`, ms)
			fails[i] = true
		case r < 8:
			payload = `{"ms":3000}`
		}
		task.Payload = []byte(payload)
		tasks[i] = task
	}
	for batch := range slices.Chunk(tasks, 500) {
		infos, err := s.client.SubmitBatch(context.Background(), batch)
		require.NoError(s.t, err)
		for _, info := range infos {
			if fails[len(ids)] {
				doomed = append(doomed, info.ID)
			}
			ids = append(ids, info.ID)
		}
	}
	return ids, doomed
}

// operate is one operator script: until ctx ends, an action on a random
// task every 20-60 ms: pause, resume (mostly a task it paused),
// reprioritize, cancel (rarer) or replay its dead letter (mostly of a task
// failing for good); every tenth through the ax CLI.
func (s *storm) operate(ctx context.Context, ids, doomed []string, script int) {
	var paused []string
	for n := 0; ctx.Err() == nil; n++ {
		id := ids[rand.IntN(len(ids))]
		r := rand.IntN(100)
		switch {
		case r >= 28 && r < 56 && len(paused) > 0 && rand.IntN(5) > 0:
			id, paused = paused[0], paused[1:]
		case r >= 85 && rand.IntN(5) > 0:
			id = doomed[rand.IntN(len(doomed))]
		}
		var verb string
		var req any = admin.TaskRequest{ID: id}
		var cli []string
		switch {
		case r < 28:
			verb, cli = admin.VerbTaskPause, []string{"task", "pause", id}
		case r < 56:
			verb, cli = admin.VerbTaskResume, []string{"task", "resume", id}
		case r < 80:
			p := rand.IntN(5)
			verb, req, cli = admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: id, Priority: p}, []string{"task", "reprioritize", id, fmt.Sprint(p)}
		case r < 85:
			verb, cli = admin.VerbTaskCancel, []string{"task", "cancel", id}
		default:
			verb, req, cli = admin.VerbDLQReplay, admin.DLQReplayRequest{ID: id}, []string{"dlq", "replay", id}
		}
		err := s.act(ctx, (n+script)%10 == 0, verb, req, cli)
		if ctx.Err() != nil {
			return
		}
		if verb == admin.VerbTaskPause && err == nil {
			paused = append(paused, id)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+rand.IntN(41)) * time.Millisecond):
		}
	}
}

// act makes one operator action, through the ax CLI (its arguments cli)
// or the management API (verb and req), and counts its outcome unless ctx
// ended meanwhile.
func (s *storm) act(ctx context.Context, viaCLI bool, verb string, req any, cli []string) error {
	var err error
	if viaCLI {
		err = s.cli(ctx, cli...)
	} else {
		callCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = s.api.Call(callCtx, verb, req, &json.RawMessage{})
		cancel()
	}
	if ctx.Err() == nil {
		s.count(verb, err)
	}
	return err
}

// cli runs one ax command against the storm's server, with a 5 s bound.
func (s *storm) cli(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, axBinary, append(args, "--server", s.url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("ax %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// count records the outcome of one action.
func (s *storm) count(verb string, err error) {
	outcome := "ok"
	var ae *admin.Error
	switch {
	case err == nil:
	case errors.As(err, &ae):
		outcome = fmt.Sprint(ae.Code)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		outcome = "no answer"
	default:
		// The CLI reports the API's code in its message.
		outcome = "cli error"
		for _, code := range []string{"400", "404", "409", "500"} {
			if strings.Contains(err.Error(), code+": ") {
				outcome = code
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.actions[verb] == nil {
		s.actions[verb] = map[string]int{}
	}
	s.actions[verb][outcome]++
}

// faults runs the storm's process faults for d: every 12 s, from 3 s, the
// leader is frozen (SIGSTOP) for twice its lease TTL and resumed; every
// 12 s, from 8 s, a random worker is SIGKILLed and a new one started.
func (s *storm) faults(d time.Duration) (freezes, kills int) {
	s.t.Helper()
	start := time.Now()
	nextFreeze, nextKill := 3*time.Second, 8*time.Second
	for time.Since(start) < d {
		switch elapsed := time.Since(start); {
		case elapsed >= nextFreeze:
			if id := s.leader(); id != "" {
				p := s.schedulers[id]
				p.signal(s.t, syscall.SIGSTOP)
				time.Sleep(4 * time.Second) // twice the lease TTL: the standby takes over meanwhile
				p.signal(s.t, syscall.SIGCONT)
				freezes++
			}
			nextFreeze += 12 * time.Second
		case elapsed >= nextKill:
			live := slices.Sorted(maps.Keys(s.workers))
			s.kill(live[rand.IntN(len(live))])
			s.spawn()
			kills++
			nextKill += 12 * time.Second
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
	return freezes, kills
}

// settle resumes every PAUSED task and waits up to d for every task to be
// SUCCEEDED, CANCELLED or DEAD; it returns the last records read and how
// many resumes it sent.
func (s *storm) settle(ids []string, d time.Duration) (map[string]*kv.Record, int) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	resumed := 0
	for {
		final := map[string]*kv.Record{}
		done := true
		for _, id := range ids {
			rec := s.record(id)
			final[id] = rec
			if rec == nil {
				done = false
				continue
			}
			switch rec.State {
			case kv.StateSucceeded, kv.StateCancelled, kv.StateDead:
			case kv.StatePaused:
				done = false
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if s.api.Call(ctx, admin.VerbTaskResume, admin.TaskRequest{ID: id}, &json.RawMessage{}) == nil {
					resumed++
				}
				cancel()
			default:
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			return final, resumed
		}
		for id, w := range s.workers {
			require.False(s.t, w.exited(), "worker %s exited:\n%s", id, w.output())
		}
		time.Sleep(time.Second)
	}
}

// report counts the outcome, logs it and requires: every task SUCCEEDED,
// CANCELLED or DEAD with a reason; every SUCCEEDED one with its effect;
// no overlapping executions; no unexplained second effect attempt.
func (s *storm) report(ids []string, final map[string]*kv.Record, resumed, freezes, kills int) {
	t := s.t
	t.Helper()
	states := map[string]int{}
	var stuck, deadNoReason, succeeded []string
	for _, id := range ids {
		rec := final[id]
		if rec == nil {
			states["MISSING"]++
			stuck = append(stuck, id)
			continue
		}
		states[string(rec.State)]++
		switch rec.State {
		case kv.StateSucceeded:
			succeeded = append(succeeded, id)
		case kv.StateCancelled:
		case kv.StateDead:
			if rec.LastError == "" {
				deadNoReason = append(deadNoReason, id)
			}
		default:
			stuck = append(stuck, id)
		}
	}
	s.mu.Lock()
	var verbs []string
	for _, verb := range slices.Sorted(maps.Keys(s.actions)) {
		var outcomes []string
		for _, outcome := range slices.Sorted(maps.Keys(s.actions[verb])) {
			outcomes = append(outcomes, fmt.Sprintf("%d %s", s.actions[verb][outcome], outcome))
		}
		verbs = append(verbs, verb+" ("+strings.Join(outcomes, ", ")+")")
	}
	actions := strings.Join(verbs, "; ")
	s.mu.Unlock()
	j := s.readJournals()
	pairs, _ := j.overlaps()
	effects := j.effects()
	t.Logf("operator storm: %d tasks, %d leader freezes (SIGSTOP 4 s, lease TTL 2 s), %d worker SIGKILLs; actions by outcome (ok, or the API's error code): %s; %d paused tasks resumed at the end",
		len(ids), freezes, kills, actions, resumed)
	t.Logf("operator storm: final states %v; stuck or lost %d; DEAD without a reason %d; overlapping executions %d; %s",
		states, len(stuck), len(deadNoReason), pairs, effects)
	for _, id := range firstN(stuck, 5) {
		t.Logf("stuck: %s: %s", id, describe(final[id]))
	}
	require.Empty(t, stuck, "tasks not SUCCEEDED, CANCELLED or DEAD %s after the storm", stormSettle)
	require.Empty(t, deadNoReason, "DEAD tasks without a reason")
	s.requireEffects(succeeded)
	j.requireOneEffect(t)
}
