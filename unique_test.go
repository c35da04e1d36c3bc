package ax_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// uniqueHour is unique by args for an hour.
func uniqueHour() *ax.UniqueOpts { return &ax.UniqueOpts{For: time.Hour} }

// A second submit within the period, unique by args or by key, returns the
// first task and publishes nothing; another type, tenant, payload or key
// is another task.
func TestUniqueDuplicateReturnsTheExistingTask(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	first, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Tenant: "acme", Payload: []byte(`{"day":1}`), Unique: uniqueHour()})
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	require.False(t, first.UniqueSkipped)

	again, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Tenant: "acme", Payload: []byte(`{"day":1}`), Unique: uniqueHour()})
	require.NoError(t, err)
	require.True(t, again.UniqueSkipped)
	require.True(t, again.Duplicate)
	require.Equal(t, first.ID, again.ID, "the existing task")
	require.Equal(t, first.Stream, again.Stream)
	require.Equal(t, first.Sequence, again.Sequence)
	require.Equal(t, first.Shard, again.Shard)
	require.Equal(t, uint64(1), natstest.StreamMsgs(t, b.JS, "AX_P2"), "the duplicate published nothing")
	_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: "acme", ID: again.ID})
	require.NoError(t, err)

	// Unique by key: the payload does not matter.
	byKey := func(key string) *ax.UniqueOpts { return &ax.UniqueOpts{Key: key, For: time.Hour} }
	k1, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Tenant: "acme", Payload: []byte("a"), Unique: byKey("customer-7")})
	require.NoError(t, err)
	require.False(t, k1.UniqueSkipped)
	k2, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Tenant: "acme", Payload: []byte("b"), Unique: byKey("customer-7")})
	require.NoError(t, err)
	require.True(t, k2.UniqueSkipped)
	require.Equal(t, k1.ID, k2.ID)

	// Each of these is a task of its own.
	for name, spec := range map[string]ax.TaskSpec{
		"another type":    {Type: "invoice", Tenant: "acme", Payload: []byte(`{"day":1}`), Unique: uniqueHour()},
		"another tenant":  {Type: "report", Tenant: "globex", Payload: []byte(`{"day":1}`), Unique: uniqueHour()},
		"another payload": {Type: "report", Tenant: "acme", Payload: []byte(`{"day":2}`), Unique: uniqueHour()},
		"another key":     {Type: "report", Tenant: "acme", Payload: []byte("a"), Unique: byKey("customer-8")},
		"not unique":      {Type: "report", Tenant: "acme", Payload: []byte(`{"day":1}`)},
	} {
		info, err := b.Client.Submit(ctx, spec)
		require.NoError(t, err, name)
		require.False(t, info.UniqueSkipped, name)
		require.NotEqual(t, first.ID, info.ID, name)
	}
	require.Equal(t, uint64(2+5), natstest.StreamMsgs(t, b.JS, "AX_P2"))

	// A batch is unique too, task by task.
	infos, err := b.Client.SubmitBatch(ctx, []ax.TaskSpec{
		{Type: "report", Tenant: "acme", Payload: []byte(`{"day":1}`), Unique: uniqueHour()},
		{Type: "report", Tenant: "acme", Payload: []byte(`{"day":3}`), Unique: uniqueHour()},
	})
	require.NoError(t, err)
	require.True(t, infos[0].UniqueSkipped)
	require.Equal(t, first.ID, infos[0].ID)
	require.False(t, infos[1].UniqueSkipped)
	require.Equal(t, uint64(2+5+1), natstest.StreamMsgs(t, b.JS, "AX_P2"))
}

// After the period the key is free: a new task is made.
func TestUniqueAfterThePeriodMakesANewTask(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	spec := func() ax.TaskSpec {
		return ax.TaskSpec{Type: "sync", Payload: []byte("x"), Unique: &ax.UniqueOpts{For: time.Second}}
	}
	first, err := b.Client.Submit(ctx, spec())
	require.NoError(t, err)
	again, err := b.Client.Submit(ctx, spec())
	require.NoError(t, err)
	require.True(t, again.UniqueSkipped, "within the period")
	var later ax.TaskInfo
	require.Eventually(t, func() bool {
		later, err = b.Client.Submit(ctx, spec())
		require.NoError(t, err)
		return !later.UniqueSkipped
	}, 5*time.Second, 100*time.Millisecond, "the claim never expired")
	require.NotEqual(t, first.ID, later.ID)
	require.Equal(t, uint64(2), natstest.StreamMsgs(t, b.JS, "AX_P2"))
}

// A task that reached a state outside the unique states (by default DEAD
// or CANCELLED; SUCCEEDED when the submit leaves it out) no longer holds
// the key: the next submit takes it over and makes a new task, which then
// holds it.
func TestUniqueStatesOutsideTheSetFreeTheKey(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	store := b.Client.Store()
	cases := []struct {
		name   string
		states []kv.State
		moves  []kv.State // from READY
		free   bool
	}{
		{"dead", nil, []kv.State{kv.StateDead}, true},
		{"cancelled", nil, []kv.State{kv.StateCancelled}, true},
		{"succeeded holds by default", nil, []kv.State{kv.StateRunning, kv.StateSucceeded}, false},
		{"running holds", nil, []kv.State{kv.StateRunning}, false},
		{"succeeded left out", []kv.State{kv.StatePending, kv.StateReady, kv.StateRunning, kv.StateRetrying}, []kv.State{kv.StateRunning, kv.StateSucceeded}, true},
		{"paused left out", []kv.State{"ready"}, []kv.State{kv.StatePaused}, true},
	}
	for _, c := range cases {
		spec := ax.TaskSpec{Type: "t", Payload: []byte(c.name), Unique: &ax.UniqueOpts{For: time.Hour, States: c.states}}
		first, err := b.Client.Submit(ctx, spec)
		require.NoError(t, err, c.name)
		from := kv.StateReady
		for _, to := range c.moves {
			_, _, err := store.Transition(ctx, kv.Ref{Tenant: first.Tenant, ID: first.ID}, from, to, kv.Actor{Action: "test"}, nil)
			require.NoError(t, err, c.name)
			from = to
		}
		before := natstest.StreamMsgs(t, b.JS, "AX_P2")
		next, err := b.Client.Submit(ctx, spec)
		require.NoError(t, err, c.name)
		if !c.free {
			require.True(t, next.UniqueSkipped, c.name)
			require.Equal(t, first.ID, next.ID, c.name)
			require.Equal(t, before, natstest.StreamMsgs(t, b.JS, "AX_P2"), c.name)
			continue
		}
		require.False(t, next.UniqueSkipped, c.name)
		require.NotEqual(t, first.ID, next.ID, c.name)
		// The new task holds the key now.
		third, err := b.Client.Submit(ctx, spec)
		require.NoError(t, err, c.name)
		require.True(t, third.UniqueSkipped, c.name)
		require.Equal(t, next.ID, third.ID, c.name)
	}
}

// Many submitters at once, on connections of their own: exactly one task
// is published, and every submit names it. Then again when its task died:
// exactly one takes the key over.
func TestUniqueConcurrentSubmitsPublishOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	const conns, each = 4, 8
	clients := make([]*ax.Client, conns)
	for i := range clients {
		_, cjs := srv.Connect()
		c, err := ax.NewClient(ctx, cjs, nil)
		require.NoError(t, err)
		clients[i] = c
	}
	spec := ax.TaskSpec{Type: "rebuild", Tenant: "acme", Unique: &ax.UniqueOpts{Key: "index", For: time.Hour}}
	race := func() (winners []string, held map[string]int) {
		var mu sync.Mutex
		held = map[string]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range conns * each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				info, err := clients[i%conns].Submit(ctx, spec)
				mu.Lock()
				defer mu.Unlock()
				if !assertNoError(t, err) {
					return
				}
				if info.UniqueSkipped {
					held[info.ID]++
				} else {
					winners = append(winners, info.ID)
				}
			}()
		}
		close(start)
		wg.Wait()
		return winners, held
	}

	winners, held := race()
	require.Len(t, winners, 1, "exactly one submit made the task")
	require.Equal(t, map[string]int{winners[0]: conns*each - 1}, held, "every other submit names it")
	require.Equal(t, uint64(1), natstest.StreamMsgs(t, js, "AX_P2"), "one message in the bucket")

	_, _, err := clients[0].Store().Transition(ctx, kv.Ref{Tenant: "acme", ID: winners[0]}, kv.StateReady, kv.StateDead, kv.Actor{Action: "test"}, nil)
	require.NoError(t, err)
	again, held := race()
	require.Len(t, again, 1, "exactly one submit took the key over")
	require.NotEqual(t, winners[0], again[0])
	require.Equal(t, map[string]int{again[0]: conns*each - 1}, held)
	require.Equal(t, uint64(2), natstest.StreamMsgs(t, js, "AX_P2"))
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("submit: %v", err)
		return false
	}
	return true
}

// A claim whose submitter died before it published (no record, not
// marked published) holds for the grace, then is taken over; a published
// task that no worker has seen yet (a publish-only submit: no record)
// holds for the whole period.
func TestUniqueClaimOfADeadSubmitter(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	client, err := ax.NewClient(ctx, js, &ax.Config{UniqueGrace: time.Second})
	require.NoError(t, err)

	// The claim a submitter wrote before it died.
	spec := ax.TaskSpec{Type: "mail", Tenant: "acme", Payload: []byte("hi"), Unique: uniqueHour()}
	claims := kv.NewClaims(js, streams.Names{})
	key := kv.ClaimKey("acme", ax.UniqueHash("mail", "", []byte("hi")))
	_, err = claims.Create(ctx, key, &kv.Claim{Tenant: "acme", ID: "ghost", Type: "mail", For: kv.Duration(time.Hour)}, time.Hour)
	require.NoError(t, err)
	info, err := client.Submit(ctx, spec)
	require.NoError(t, err)
	require.True(t, info.UniqueSkipped, "within the grace the submitter may still publish")
	require.Equal(t, "ghost", info.ID)
	require.Eventually(t, func() bool {
		info, err = client.Submit(ctx, spec)
		require.NoError(t, err)
		return !info.UniqueSkipped
	}, 5*time.Second, 100*time.Millisecond, "the dead submitter's claim was never taken over")
	require.NotEqual(t, "ghost", info.ID)
	require.Equal(t, uint64(1), natstest.StreamMsgs(t, js, "AX_P2"))
	claim, _, err := claims.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, info.ID, claim.ID)
	require.True(t, claim.Published)
	require.Equal(t, info.Sequence, claim.Seq)

	// Publish-only: the task has no record until a worker sees it, and its
	// published claim holds past the grace.
	_, pjs := srv.Connect()
	producer, err := ax.NewClient(ctx, pjs, &ax.Config{PublishOnly: true, UniqueGrace: time.Second})
	require.NoError(t, err)
	raw := ax.TaskSpec{Type: "mail", Tenant: "acme", Payload: []byte("raw"), Unique: uniqueHour()}
	first, err := producer.Submit(ctx, raw)
	require.NoError(t, err)
	require.False(t, first.UniqueSkipped)
	time.Sleep(1500 * time.Millisecond) // past the grace, on purpose
	again, err := producer.Submit(ctx, raw)
	require.NoError(t, err)
	require.True(t, again.UniqueSkipped)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, uint64(2), natstest.StreamMsgs(t, js, "AX_P2"))
}

// Bad unique options are refused before anything is written; a claim key
// holding something ax did not write (a raw writer's mistake, a claim
// naming another tenant's task, a publish acknowledgement a producer's
// reply subject wrote there, which has no TTL) holds nothing: the submit
// replaces it by compare-and-set. Before issue 35 it was an error, and the
// key was refused for good.
func TestUniqueRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	for name, u := range map[string]ax.UniqueOpts{
		"no period":        {},
		"under a second":   {For: 500 * time.Millisecond},
		"over a year":      {For: ax.MaxUniqueFor + time.Hour},
		"an unknown state": {For: time.Hour, States: []kv.State{"DONE"}},
		"a key too long":   {For: time.Hour, Key: string(make([]byte, ax.MaxUniqueKeyLen+1))},
	} {
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "t", Unique: &u})
		require.ErrorIs(t, err, ax.ErrInvalidTask, name)
		require.ErrorContains(t, err, "Unique.", name)
	}
	require.Zero(t, natstest.StreamMsgs(t, b.JS, "AX_P2"))

	bucket, err := b.JS.KeyValue(ctx, "AX_UNIQUE")
	require.NoError(t, err)
	for name, value := range map[string]string{
		"not JSON":              `garbage`,
		"an unknown field":      `{"tenant":"acme","id":"x","owner":"me"}`,
		"another tenant's task": `{"tenant":"globex","id":"theirs"}`,
		"a bad id":              `{"tenant":"acme","id":"a.b"}`,
	} {
		payload := []byte(name)
		key := kv.ClaimKey("acme", ax.UniqueHash("t", "", payload))
		rev, err := bucket.Put(ctx, key, []byte(value))
		require.NoError(t, err)
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "t", Tenant: "acme", Payload: payload, Unique: uniqueHour()})
		require.NoError(t, err, name)
		require.False(t, info.Duplicate, "%s holds nothing", name)
		entry, err := bucket.Get(ctx, key)
		require.NoError(t, err)
		require.Greater(t, entry.Revision(), rev, "%s: replaced by compare-and-set", name)
		require.Contains(t, string(entry.Value()), info.ID, "%s: the key is the new task's", name)
	}
	require.Equal(t, uint64(4), natstest.StreamMsgs(t, b.JS, "AX_P2"), "each submit published its task")
}

// A deployment provisioned before unique tasks has no AX_UNIQUE: a unique
// submit says to provision, and publishes nothing.
func TestUniqueNeedsItsBucket(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	require.NoError(t, b.JS.DeleteKeyValue(ctx, "AX_UNIQUE"))
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "t", Unique: uniqueHour()})
	require.ErrorContains(t, err, "run `ax provision`")
	require.Zero(t, natstest.StreamMsgs(t, b.JS, "AX_P2"))
}

// A unique submit the bucket refuses (full) stored nothing: its claim is
// released, so that the key is free for the retry.
func TestUniqueRefusedSubmitReleasesItsClaim(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{Streams: &streams.Config{Capacity: 1}})
	ctx := context.Background()
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "fill"})
	require.NoError(t, err)
	_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "t", Tenant: "acme", Payload: []byte("p"), Unique: uniqueHour()})
	require.ErrorIs(t, err, ax.ErrOverloaded)
	claims := kv.NewClaims(b.JS, streams.Names{})
	_, _, err = claims.Get(ctx, kv.ClaimKey("acme", ax.UniqueHash("t", "", []byte("p"))))
	require.ErrorIs(t, err, kv.ErrNotFound, "the claim was released")
	// The released key is claimed again by the next submit (over its marker).
	_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "t", Tenant: "acme", Payload: []byte("p"), Unique: uniqueHour()})
	require.ErrorIs(t, err, ax.ErrOverloaded)
}

// A submitter that died after its publish and before it marked its claim
// published left a message no worker has seen: a client that may read the
// buckets finds it and keeps the key held past the grace; a publish-only
// client, which may not, takes the key over after the grace (docs/WIRE.md,
// "What holds").
func TestUniqueClaimOfASubmitterDeadAfterItsPublish(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	client, err := ax.NewClient(ctx, js, &ax.Config{UniqueGrace: time.Second})
	require.NoError(t, err)
	_, pjs := srv.Connect()
	producer, err := ax.NewClient(ctx, pjs, &ax.Config{PublishOnly: true, UniqueGrace: time.Second})
	require.NoError(t, err)

	spec := ax.TaskSpec{Type: "mail", Tenant: "acme", Payload: []byte("hi"), Unique: uniqueHour()}
	key := kv.ClaimKey("acme", ax.UniqueHash("mail", "", []byte("hi")))
	_, err = kv.NewClaims(js, streams.Names{}).Create(ctx, key,
		&kv.Claim{Tenant: "acme", ID: "ghost", Type: "mail", Priority: 2, Key: "ghost", For: kv.Duration(time.Hour)}, time.Hour)
	require.NoError(t, err)
	_, err = js.Publish(ctx, "ax.submit.p2.acme.mail.ghost", []byte("hi"))
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond) // past the grace, on purpose

	info, err := client.Submit(ctx, spec)
	require.NoError(t, err)
	require.True(t, info.UniqueSkipped, "the ghost's message waits in its bucket")
	require.Equal(t, "ghost", info.ID)
	require.Equal(t, uint64(1), natstest.StreamMsgs(t, js, "AX_P2"))

	info, err = producer.Submit(ctx, spec)
	require.NoError(t, err)
	require.False(t, info.UniqueSkipped, "a publish-only client cannot see the message")
	require.Equal(t, uint64(2), natstest.StreamMsgs(t, js, "AX_P2"))
}
