package worker

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// atkRuns counts the runs of each task (by payload) across workers.
type atkRuns struct {
	mu   sync.Mutex
	runs map[string]int
}

func newAtkRuns() *atkRuns { return &atkRuns{runs: map[string]int{}} }

func (r *atkRuns) add(p string) {
	r.mu.Lock()
	r.runs[p]++
	r.mu.Unlock()
}

func (r *atkRuns) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// twice lists the tasks run more than once.
func (r *atkRuns) twice() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for p, n := range r.runs {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", p, n))
		}
	}
	sort.Strings(out)
	return out
}

// missing lists the tasks 0..n-1 not run.
func (r *atkRuns) missing(n int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for i := range n {
		if r.runs[strconv.Itoa(i)] == 0 {
			out = append(out, i)
		}
	}
	return out
}

func atkRegistry(t *testing.T, r *atkRuns, work time.Duration) *Registry {
	t.Helper()
	reg := NewRegistry()
	require.NoError(t, reg.Handle("job", func(_ context.Context, task *Task) error {
		r.add(string(task.Payload))
		if work > 0 {
			time.Sleep(work)
		}
		return nil
	}, nil))
	return reg
}

func atkShardZeroKeys(n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint("k", i); streams.Shard(k) == 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// atkStart makes and starts a worker of shard 0, stopped at cleanup.
func atkStart(t *testing.T, js jetstream.JetStream, id string, reg *Registry) *Worker {
	t.Helper()
	w, err := New(context.Background(), js, &Config{ID: id, Registry: reg, Shards: []int{0}, Concurrency: 8, Logger: zap.NewNop()})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// atkPublish raw-publishes tasks from..to-1 on keys of shard 0 at P2 and
// waits for their acks.
func atkPublish(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	keys := atkShardZeroKeys(50)
	names := streams.DefaultNames()
	for i := from; i < to; i++ {
		_, err := js.PublishAsync(names.SubmitSubject(2, "acme", "job", keys[i%len(keys)]), []byte(strconv.Itoa(i)))
		require.NoError(t, err)
		if i%4 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
}

// atkPublishUntil publishes tasks 0, 1, ... as atkPublish does until stop
// is closed, then tail more, and returns how many.
func atkPublishUntil(t *testing.T, js jetstream.JetStream, stop <-chan struct{}, tail int) int {
	t.Helper()
	keys := atkShardZeroKeys(50)
	names := streams.DefaultNames()
	n, end := 0, -1
	for end < 0 || n < end {
		if end < 0 {
			select {
			case <-stop:
				end = n + tail
			default:
			}
		}
		_, err := js.PublishAsync(names.SubmitSubject(2, "acme", "job", keys[n%len(keys)]), []byte(strconv.Itoa(n)))
		require.NoError(t, err)
		n++
		if n%2 == 0 { // 400 a second: well within what one worker runs
			time.Sleep(5 * time.Millisecond)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	return n
}

// atkAwaitAll requires every task 0..n-1 to run within 20 s, and none twice.
func atkAwaitAll(t *testing.T, r *atkRuns, n int, what string) {
	t.Helper()
	start := time.Now()
	ok := assertEventually(func() bool { return r.distinct() >= n }, 20*time.Second)
	if !ok {
		miss := r.missing(n)
		t.Errorf("%s: %d of %d tasks did not run within 20 s (first missing: %v)", what, len(miss), n, miss[:min(10, len(miss))])
	} else {
		t.Logf("%s: all %d tasks ran, %.2fs after the last was published", what, n, time.Since(start).Seconds())
	}
	time.Sleep(500 * time.Millisecond) // a second run would come now
	if tw := r.twice(); len(tw) > 0 {
		t.Errorf("%s: %d tasks ran more than once: %v", what, len(tw), tw[:min(10, len(tw))])
	}
}

func assertEventually(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

func atkServer(t *testing.T, policy string, pinnedTTL time.Duration) *natstest.Server {
	t.Helper()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, &streams.Config{AckWait: time.Minute, PriorityPolicy: policy, PinnedTTL: pinnedTTL})
	return srv
}

type atkMoves struct {
	name   string
	policy string
	modes  []shardMode // cycled; the last move is to shardOwned
}

// atkShardMoves is TestShardMovesLoseNoDelivery with a policy and a cycle
// of modes, tasks published at a steady pace from the first move to 200
// after the last, every run counted: each task runs once, all within 20 s
// of the last publish (ack wait 1 minute).
func atkShardMoves(t *testing.T, cases []atkMoves) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const moves = 300
			srv := atkServer(t, tc.policy, 0)
			_, js := srv.Connect()
			runs := newAtkRuns()
			w := atkStart(t, js, "w1", atkRegistry(t, runs, 0))
			ctx := context.Background()
			moved := make(chan struct{})
			go func() {
				defer close(moved)
				for i := range moves {
					if err := w.intake.setShard(ctx, w.intake.sets[0], 0, tc.modes[i%len(tc.modes)]); err != nil {
						t.Errorf("move %d: %v", i, err)
						return
					}
					time.Sleep(time.Duration(2+i%7) * time.Millisecond)
				}
				if err := w.intake.setShard(ctx, w.intake.sets[0], 0, shardOwned); err != nil {
					t.Errorf("last move: %v", err)
				}
			}()
			tasks := atkPublishUntil(t, js, moved, 200)
			w.intake.pulling.mu.Lock()
			lingering := len(w.intake.pulling.all)
			w.intake.pulling.mu.Unlock()
			t.Logf("pullers not returned after the last move: %d", lingering)
			atkAwaitAll(t, runs, tasks, tc.name)
		})
	}
}

// TestShardMoveAttackOverflowAndModes: shard moves under overflow and
// through the steal and assist modes.
func TestShardMoveAttackOverflowAndModes(t *testing.T) {
	t.Parallel()
	atkShardMoves(t, []atkMoves{
		{"overflow/idle-owned", "overflow", []shardMode{shardIdle, shardOwned}},
		{"overflow/steal-owned", "overflow", []shardMode{shardSteal, shardOwned}},
		{"none/assist-owned", "none", []shardMode{shardAssist, shardOwned}},
		{"overflow/idle-owned-steal-assist", "overflow", []shardMode{shardIdle, shardOwned, shardSteal, shardAssist}},
	})
}

// TestShardMoveAttackPinned: shard moves under pinned_client (default
// PinnedTTL, 10 s: see TestShardMoveAttackPinnedBackAndForth for what a longer
// one does).
func TestShardMoveAttackPinned(t *testing.T) {
	t.Parallel()
	atkShardMoves(t, []atkMoves{
		{"pinned/idle-owned", "pinned_client", []shardMode{shardIdle, shardOwned}},
		{"pinned/assist-owned", "pinned_client", []shardMode{shardAssist, shardOwned}},
	})
}

// TestShardMoveAttackTwoWorkersSwap: two workers on one server serve shard 0
// alternately, one idle while the other owns it, swapped every few
// milliseconds, so that the lingering requests of one compete with the
// other's. Every task runs exactly once, all within 20 s of the last publish
// (200 tasks after the last swap).
func TestShardMoveAttackTwoWorkersSwap(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"none", "overflow", "pinned_client"} {
		t.Run(policy, func(t *testing.T) {
			const swaps = 300
			srv := atkServer(t, policy, 0)
			_, jsA := srv.Connect()
			_, jsB := srv.Connect()
			runs := newAtkRuns()
			reg := atkRegistry(t, runs, 0)
			a := atkStart(t, jsA, "wa", reg)
			b := atkStart(t, jsB, "wb", reg)
			ctx := context.Background()
			require.NoError(t, b.intake.setShard(ctx, b.intake.sets[0], 0, shardIdle))
			moved := make(chan struct{})
			go func() {
				defer close(moved)
				owner, other := a, b
				for i := range swaps {
					var err error
					if i%2 == 0 { // a gap with no owner
						err = owner.intake.setShard(ctx, owner.intake.sets[0], 0, shardIdle)
						if err == nil {
							err = other.intake.setShard(ctx, other.intake.sets[0], 0, shardOwned)
						}
					} else { // a moment with two
						err = other.intake.setShard(ctx, other.intake.sets[0], 0, shardOwned)
						if err == nil {
							err = owner.intake.setShard(ctx, owner.intake.sets[0], 0, shardIdle)
						}
					}
					if err != nil {
						t.Errorf("swap %d: %v", i, err)
						return
					}
					owner, other = other, owner
					time.Sleep(time.Duration(2+i%7) * time.Millisecond)
				}
			}()
			_, jsP := srv.Connect()
			tasks := atkPublishUntil(t, jsP, moved, 200)
			atkAwaitAll(t, runs, tasks, policy)
		})
	}
}

// pullerGoroutines counts the goroutines running a puller's loop.
func pullerGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "worker.(*puller).run(") {
			n++
		}
	}
	return n
}

// TestShardMoveAttackStopWithLingering: a worker whose shard moved often has
// many stopped pullers whose requests linger; Stop, while tasks flow, must
// return promptly and leave none of them (no puller loop, no subscription
// of its connection), and the tasks published before, during and after
// the stop all run on a second worker within 20 s (ack wait 1 minute).
func TestShardMoveAttackStopWithLingering(t *testing.T) {
	// Not parallel: it counts the puller loops of the whole process.
	const tasks = 2400
	srv := atkServer(t, "none", 0)
	ncA, jsA := srv.Connect()
	_, jsB := srv.Connect()
	_, jsP := srv.Connect()
	runs := newAtkRuns()
	reg := atkRegistry(t, runs, 2*time.Millisecond)
	// What a worker that never moved leaves on its connection once stopped
	// (nats.go's shared reply subscriptions).
	ncC, jsC := srv.Connect()
	c := atkStart(t, jsC, "wc", reg)
	require.NoError(t, c.Stop(context.Background()))
	subs0 := ncC.NumSubscriptions()
	ncC.Close()
	a := atkStart(t, jsA, "wa", reg)
	ctx := context.Background()
	for i := range 60 { // lingering requests: 30 stopped pullers per priority
		mode := shardOwned
		if i%2 == 0 {
			mode = shardIdle
		}
		require.NoError(t, a.intake.setShard(ctx, a.intake.sets[0], 0, mode))
		time.Sleep(3 * time.Millisecond)
	}
	require.NoError(t, a.intake.setShard(ctx, a.intake.sets[0], 0, shardOwned))
	a.intake.pulling.mu.Lock()
	lingering := len(a.intake.pulling.all)
	a.intake.pulling.mu.Unlock()
	require.Greater(t, lingering, 20, "stopped pullers whose requests linger")

	b := atkStart(t, jsB, "wb", reg)
	var sent atomic.Int64 // tasks published so far
	published := make(chan struct{})
	go func() {
		defer close(published)
		keys := atkShardZeroKeys(50)
		names := streams.DefaultNames()
		for i := range tasks {
			if _, err := jsP.PublishAsync(names.SubmitSubject(2, "acme", "job", keys[i%len(keys)]), []byte(strconv.Itoa(i))); err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			sent.Add(1)
			if i%4 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	require.Eventually(t, func() bool { return runs.distinct() > tasks/4 }, 20*time.Second, 5*time.Millisecond)
	began := time.Now()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, a.Stop(stopCtx))
	took := time.Since(began)
	cut := int(sent.Load()) // the tasks from here on were published after the stop
	t.Logf("stop took %s with %d pullers not returned before it; %d tasks run when it began, %d published when it ended", took, lingering, runs.distinct(), cut)
	require.Less(t, took, 3*time.Second, "Stop returns promptly")
	a.intake.pulling.mu.Lock()
	left := len(a.intake.pulling.all)
	a.intake.pulling.mu.Unlock()
	require.Zero(t, left, "pullers of the stopped worker")
	b.intake.pulling.mu.Lock()
	bPullers := len(b.intake.pulling.all)
	b.intake.pulling.mu.Unlock()
	require.Equal(t, bPullers, pullerGoroutines(), "puller loops running: only the second worker's")
	require.Eventually(t, func() bool { return ncA.NumSubscriptions() <= subs0 }, 2*time.Second, 10*time.Millisecond,
		"subscriptions left on the stopped worker's connection: %d, %d by a worker that never moved", ncA.NumSubscriptions(), subs0)
	<-published
	select {
	case <-jsP.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	atkPublish(t, jsP, tasks, tasks+200) // after the stop
	// Every task runs within 20 s but those the server was sending a's
	// request when Stop ended it: nats.go drops them and they wait out
	// the ack wait (a minute). That is at most one request's batch
	// (PrefetchPerShard: only P2 carries tasks), all published before the
	// stop ended.
	ran := assertEventually(func() bool { return runs.distinct() >= tasks+200 }, 20*time.Second)
	miss := runs.missing(tasks + 200)
	t.Logf("tasks left to their ack wait by the stop: %d %v", len(miss), miss)
	if !ran {
		require.LessOrEqual(t, len(miss), a.cfg.PrefetchPerShard, "tasks left to their ack wait by the stop")
		require.Less(t, miss[len(miss)-1], cut, "a task published after the stop did not run within 20 s")
	}
	time.Sleep(500 * time.Millisecond)
	require.Empty(t, runs.twice(), "tasks run more than once")
}

// TestShardMoveAttackPinnedLingeringTakesPin: under pinned_client, a request
// of a worker that stopped serving a shard before the shard had a pin
// carries no pin id; it lingers, and when the next message comes the
// server pins it, not the new owner's request (which came later). The old
// worker hands the message back and, sent a message while stopped, unpins
// the group ([puller.givePin]): its request is refused and the new
// owner's is pinned. Without the unpin the pin stayed with the old worker,
// which pulls no more, and the task waited out the PinnedTTL (30 s here:
// red at 20 s). Before lingering requests, the old request had been ended
// by the client, and the server skips a request without interest.
func TestShardMoveAttackPinnedLingeringTakesPin(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second // the requests last ttl/2
	srv := atkServer(t, "pinned_client", ttl)
	_, jsA := srv.Connect()
	_, jsB := srv.Connect()
	_, jsP := srv.Connect()
	runs := newAtkRuns()
	reg := atkRegistry(t, runs, 0)
	a := atkStart(t, jsA, "wa", reg)
	ctx := context.Background()
	time.Sleep(300 * time.Millisecond) // a's requests are open, unpinned: no message came yet
	require.NoError(t, a.intake.setShard(ctx, a.intake.sets[0], 0, shardIdle))
	atkStart(t, jsB, "wb", reg)
	time.Sleep(300 * time.Millisecond) // b's requests are open too
	start := time.Now()
	atkPublish(t, jsP, 0, 1)
	ok := assertEventually(func() bool { return runs.distinct() == 1 }, 20*time.Second)
	require.True(t, ok, "the task published %.1fs ago on the shard b owns has not run%s", time.Since(start).Seconds(), atkPinState(t, jsP))
	t.Logf("ran after %s", time.Since(start))
}

// TestShardMoveAttackPinnedBackAndForth: the same with one worker whose shard
// goes idle and comes back at once (owned again): its stopped puller's
// request, without a pin id, takes the pin when the first task comes and
// hands the task back (a stopped puller's request hands back all it
// brings), then unpins; the worker's new request, which came after it, is
// pinned and runs the task. Without the unpin it waited out the
// PinnedTTL.
func TestShardMoveAttackPinnedBackAndForth(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second
	srv := atkServer(t, "pinned_client", ttl)
	_, jsA := srv.Connect()
	_, jsP := srv.Connect()
	runs := newAtkRuns()
	a := atkStart(t, jsA, "wa", atkRegistry(t, runs, 0))
	ctx := context.Background()
	time.Sleep(300 * time.Millisecond) // a's requests are open, unpinned: no message came yet
	require.NoError(t, a.intake.setShard(ctx, a.intake.sets[0], 0, shardIdle))
	require.NoError(t, a.intake.setShard(ctx, a.intake.sets[0], 0, shardOwned))
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	atkPublish(t, jsP, 0, 1)
	ok := assertEventually(func() bool { return runs.distinct() == 1 }, 20*time.Second)
	require.True(t, ok, "the task published %.1fs ago on the shard a owns has not run%s", time.Since(start).Seconds(), atkPinState(t, jsP))
	t.Logf("ran after %s", time.Since(start))
}

// atkPinState describes the P2 consumer of shard 0.
func atkPinState(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	names := streams.DefaultNames()
	ctx := context.Background()
	cons, err := js.Consumer(ctx, names.PriorityStream(2), names.ConsumerName(2, 0))
	if err != nil {
		return ": " + err.Error()
	}
	i, err := cons.Info(ctx)
	if err != nil {
		return ": " + err.Error()
	}
	pin := ""
	for _, g := range i.PriorityGroups {
		pin = fmt.Sprintf("%s since %s", g.PinnedClientID, g.PinnedTS.Format(time.TimeOnly))
	}
	return fmt.Sprintf(" (consumer %s: pinned %s; %d deliveries of %d messages, %d waiting for ack, %d pull requests waiting)",
		i.Name, pin, i.Delivered.Consumer, i.Delivered.Stream, i.NumAckPending, i.NumWaiting)
}
