package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// The gate alone, against an AX_LIMITS kept in memory ([memLimits]): no
// server is started. The tests that run it in a worker against a real
// server are in limits_test.go and the limits_*_test.go files.

// memLimits is an AX_LIMITS in memory, for the gate's unit tests: a
// concurrency limit's slots by holder, and a rate limit's starts (given
// and reserved) with no refill: a start not given is due after 1/rate.
type memLimits struct {
	mu       sync.Mutex
	slots    map[string][]string        // target -> holders, in the order they took a slot
	given    map[string]int             // target -> starts taken
	reserved map[string]map[string]bool // target -> holders with a start reserved
	writes   int                        // acquires and releases
	released []string                   // holders released, in order
	takeWait map[string]time.Duration   // target -> what Take answers (another worker took the start)
}

func newMemLimits() *memLimits {
	return &memLimits{slots: map[string][]string{}, given: map[string]int{}, reserved: map[string]map[string]bool{}, takeWait: map[string]time.Duration{}}
}

func (m *memLimits) Acquire(_ context.Context, target string, n int, holder string, _ time.Duration) (bool, error) {
	got, err := m.AcquireSome(context.Background(), target, n, []string{holder}, 0)
	return len(got) == 1, err
}

func (m *memLimits) AcquireSome(_ context.Context, target string, n int, holders []string, _ time.Duration) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	var got []string
	for _, h := range holders {
		if len(m.slots[target]) >= n {
			break
		}
		m.slots[target] = append(m.slots[target], h)
		got = append(got, h)
	}
	return got, nil
}

func (m *memLimits) Release(_ context.Context, target, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	m.released = append(m.released, holder)
	m.slots[target] = slices.DeleteFunc(m.slots[target], func(h string) bool { return h == holder })
	return nil
}

func (m *memLimits) Renew(_ context.Context, target string, holders []string, _ time.Duration) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var lost []string
	for _, h := range holders {
		if !slices.Contains(m.slots[target], h) {
			lost = append(lost, h)
		}
	}
	return lost, nil
}

func (m *memLimits) Reserve(_ context.Context, target string, rate float64, burst int, holder string, _ time.Duration) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.given[target]+len(m.reserved[target]) >= max(burst, 1) {
		return time.Duration(float64(time.Second) / rate), nil
	}
	if m.reserved[target] == nil {
		m.reserved[target] = map[string]bool{}
	}
	m.reserved[target][holder] = true
	return 0, nil
}

func (m *memLimits) Unreserve(_ context.Context, target, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.reserved[target], holder)
	return nil
}

func (m *memLimits) Take(_ context.Context, target string, _ float64, _ int, holder string) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.reserved[target], holder)
	if wait := m.takeWait[target]; wait > 0 {
		return wait, nil
	}
	m.given[target]++
	return 0, nil
}

func (m *memLimits) WatchSlots(context.Context) (jetstream.KeyWatcher, error) {
	return nil, errors.New("no watch in memory")
}

// steal takes holder's slot of target away, as another worker does once
// it has expired.
func (m *memLimits) steal(target, holder string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.slots[target] = slices.DeleteFunc(m.slots[target], func(h string) bool { return h == holder })
}

func (m *memLimits) held(target string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.slots[target])
}

func (m *memLimits) releasedHolders() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.released)
}

func (m *memLimits) writeCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// gateMsg is a delivered message as far as the gate reads it: its data.
type gateMsg struct {
	jetstream.Msg
	data []byte
}

func (m gateMsg) Data() []byte { return m.data }

type gateBundle struct {
	g       *gate
	store   *memLimits
	woken   chan *delivery // handed back to the intake
	dropped chan *delivery // handed back to the stream
	held    *holdCount
	task    flowTask
}

type holdCount struct {
	mu      sync.Mutex
	reasons map[string]int
}

func (h *holdCount) TaskHeldBack(_, _, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reasons[reason]++
}

func setupGate(t *testing.T, ttl time.Duration, limits kv.Limits) *gateBundle {
	t.Helper()
	b := &gateBundle{store: newMemLimits(), woken: make(chan *delivery, 64), dropped: make(chan *delivery, 64),
		held: &holdCount{reasons: map[string]int{}}, task: flowTask{id: "t", typ: "email", tenant: "acme", key: "k"}}
	b.g = newGate(gateDeps{id: "w1", ttl: ttl,
		bindFunc:        func(context.Context) (gateStore, error) { return b.store, nil },
		watchLimitsFunc: func(context.Context) (jetstream.KeyWatcher, error) { return nil, errors.New("no watch") },
		opCtxFunc:       context.Background,
		wakeFunc:        func(d *delivery) { b.woken <- d },
		dropFunc:        func(d *delivery) { b.dropped <- d },
		weightsFunc:     func(groupWeights) {},
		done:            make(chan struct{}), stats: &counters{}, observer: b.held, log: zaptest.NewLogger(t)})
	b.g.setLimits(limits, 1)
	return b
}

func newGateDelivery(name string) *delivery {
	return &delivery{msg: gateMsg{data: []byte(name)}}
}

// admitRun admits d and requires a ticket.
func (b *gateBundle) admitRun(t *testing.T, d *delivery) *ticket {
	t.Helper()
	tk, v := b.g.admit(d, b.task)
	require.Equal(t, admitRun, v.kind, "not admitted: %+v", v)
	return tk
}

// admitParked admits d, requires it parked, and parks it as its slot does
// once done with it.
func (b *gateBundle) admitParked(t *testing.T, d *delivery) {
	t.Helper()
	tk, v := b.g.admit(d, b.task)
	require.Nil(t, tk)
	require.Equal(t, admitParked, v.kind, "not parked: %+v", v)
	require.True(t, b.g.parkHeld(d))
}

func (b *gateBundle) nextWoken(t *testing.T) *delivery {
	t.Helper()
	select {
	case d := <-b.woken:
		return d
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no parked delivery was woken")
		return nil
	}
}

func (b *gateBundle) parkedCount() int {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	n := 0
	for _, q := range b.g.parked {
		n += len(q)
	}
	return n
}

// Under a concurrency limit of 2 the gate admits two deliveries and parks
// the rest; a burst behind a full limit parks without a write; a finished
// task's slot goes to the oldest parked delivery, which runs on it without
// a write of its own, and the slots held stay 2 throughout.
func TestGateConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Limits: map[string]kv.Limit{"email": {Concurrency: 2}}})
	tk1 := b.admitRun(t, newGateDelivery("d1"))
	tk2 := b.admitRun(t, newGateDelivery("d2"))
	require.Len(t, b.store.held("email"), 2)
	d3 := newGateDelivery("d3")
	b.admitParked(t, d3) // asks AX_LIMITS once: full
	writes := b.store.writeCount()
	d4 := newGateDelivery("d4")
	b.admitParked(t, d4)
	require.Equal(t, writes, b.store.writeCount(), "a delivery behind a parked one asked AX_LIMITS")
	require.Equal(t, 2, b.held.reasons[HeldLimited])

	tk1.done()
	woken := b.nextWoken(t)
	require.Same(t, d3, woken, "not the oldest parked delivery")
	require.True(t, woken.flow.woken)
	require.Len(t, woken.flow.handed, 1)
	writes = b.store.writeCount()
	tk3 := b.admitRun(t, woken)
	require.Equal(t, writes, b.store.writeCount(), "a handed slot cost a write")
	require.Equal(t, tk1.holder, tk3.slots[0].holder, "the slot was not handed on")
	require.Len(t, b.store.held("email"), 2, "handing on added a slot")
	require.EqualValues(t, 1, b.g.stats.HandedOn.Load())
	tk1.done() // a second done does nothing
	require.Equal(t, 1, b.parkedCount())

	tk2.done()
	require.Same(t, d4, b.nextWoken(t))
	tk3.done()
	require.Empty(t, b.woken)
	require.Len(t, b.store.held("email"), 1, "the slot with no delivery waiting was not given back")
}

// Parked deliveries are woken oldest first, and a limit's slot passes
// from one to the next at most maxHandoffs times in a row; then it goes
// back to AX_LIMITS and the deliveries parked here leave it to the other
// workers for turnYield. When the slots have returned, parking ends: the
// deliveries still parked go back to their stream.
func TestGateParksAndWakesInOrder(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Limits: map[string]kv.Limit{"email": {Concurrency: 1}}})
	tk := b.admitRun(t, newGateDelivery("first"))
	var parked []*delivery
	for i := range maxHandoffs + 2 {
		d := newGateDelivery(fmt.Sprint("d", i))
		b.admitParked(t, d)
		parked = append(parked, d)
	}
	holder := tk.holder
	for i := range maxHandoffs {
		tk.done()
		d := b.nextWoken(t)
		require.Same(t, parked[i], d, "woken out of order at %d", i)
		tk = b.admitRun(t, d)
		require.Equal(t, holder, tk.slots[0].holder)
	}
	released := len(b.store.releasedHolders())
	ended := time.Now()
	tk.done() // its turn here is over
	require.Len(t, b.store.releasedHolders(), released+1, "the slot was handed on past maxHandoffs")
	b.g.unparkOldest()  // a poll during the yield takes no slot for the deliveries parked here
	d := b.nextWoken(t) // after turnYield, none of the other workers having taken it
	require.GreaterOrEqual(t, time.Since(ended), turnYield, "the slot was not left to the other workers")
	require.Same(t, parked[maxHandoffs], d)
	require.NotEqual(t, holder, d.flow.handed[0].holder, "a fresh slot, taken for it")

	b.g.closeParking()
	select {
	case dropped := <-b.dropped:
		require.Same(t, parked[maxHandoffs+1], dropped)
	default:
		require.FailNow(t, "a delivery still parked when the slots returned was not handed back to its stream")
	}
	require.False(t, b.g.reservePark("email", newGateDelivery("late")), "parked after the slots returned")
	b.g.returnHanded(d)
	require.Empty(t, b.store.held("email"), "a handed slot left held")
}

// Under a rate limit the gate admits the burst, then parks for the
// rate's next start, due after 1/rate; the start of an admitted task is
// taken after its claim, and one that another worker took meanwhile sends
// the task back to wait.
func TestGateRateLimit(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Limits: map[string]kv.Limit{"email": {Rate: 2, Burst: 2}}})
	tk1 := b.admitRun(t, newGateDelivery("d1"))
	tk2 := b.admitRun(t, newGateDelivery("d2"))
	d3 := newGateDelivery("d3")
	_, v := b.g.admit(d3, b.task)
	require.Equal(t, admitParked, v.kind)
	require.Equal(t, rateParkKey("email"), d3.flow.park)
	require.Equal(t, 500*time.Millisecond, d3.flow.parkWait)
	parkedAt := time.Now()
	require.True(t, b.g.parkHeld(d3))
	require.Same(t, d3, b.nextWoken(t), "not woken for the rate's next start")
	require.GreaterOrEqual(t, time.Since(parkedAt), 500*time.Millisecond, "woken before the rate's next start was due")

	over, wait, err := tk1.takeStarts()
	require.NoError(t, err)
	require.Zero(t, wait)
	require.Zero(t, over)
	b.store.mu.Lock()
	b.store.takeWait["email"] = 300 * time.Millisecond // another worker took the last start
	b.store.mu.Unlock()
	over, wait, err = tk2.takeStarts()
	require.NoError(t, err)
	require.Equal(t, "email", over.target)
	require.Equal(t, 300*time.Millisecond, wait)
	d2 := newGateDelivery("d2")
	require.Equal(t, admitParked, b.g.park(d2, b.task, over, wait).kind)
	require.Equal(t, rateParkKey("email"), d2.flow.park)
	parkedAt = time.Now()
	require.True(t, b.g.parkHeld(d2))
	require.Same(t, d2, b.nextWoken(t), "not woken for the start it lost")
	require.GreaterOrEqual(t, time.Since(parkedAt), 300*time.Millisecond, "woken before the lost start's next was due")
	tk1.done()
	tk2.done()
}

// A paused type or tenant holds every delivery back, naming the pause,
// and gives back a slot handed to it; the delay of its nak doubles with
// each delivery up to pausedMaxDelay.
func TestGatePause(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Paused: map[string]kv.Pause{"tenant:acme": {}}})
	_, v := b.g.admit(newGateDelivery("d1"), b.task)
	require.Equal(t, verdict{kind: admitPaused, by: "tenant:acme"}, v)
	b.g.setLimits(kv.Limits{Paused: map[string]kv.Pause{"email": {}}, Limits: map[string]kv.Limit{"email": {Concurrency: 1}}}, 2)
	_, err := b.g.store(context.Background()) // bound by the admission that took the slot
	require.NoError(t, err)
	d := newGateDelivery("d2")
	hold := &slotHold{}
	hold.confirm(time.Now(), time.Minute, 0) // still trusted: only the pause gives it back
	d.flow.handed = []heldSlot{{target: "email", holder: "w1/handed", hold: hold}}
	d.flow.handedUnder = b.g.table.Load()
	_, v = b.g.admit(d, b.task)
	require.Equal(t, verdict{kind: admitPaused, by: "email"}, v)
	require.Empty(t, d.flow.handed)
	require.Contains(t, b.store.releasedHolders(), "w1/handed", "a slot handed to a paused delivery was kept")
	require.EqualValues(t, 2, b.g.stats.Paused.Load())
	require.Equal(t, pausedFirstDelay, pausedDelay(1))
	require.Equal(t, 2*pausedFirstDelay, pausedDelay(2))
	require.Equal(t, pausedMaxDelay, pausedDelay(50))

	other := b.task
	other.typ = "sms"
	tk, v := b.g.admit(newGateDelivery("d3"), other)
	require.Equal(t, admitRun, v.kind, "a type not paused was held back")
	require.Nil(t, tk)
	b.g.setLimits(kv.Limits{}, 3)
	_, v = b.g.admit(newGateDelivery("d4"), b.task)
	require.Equal(t, admitRun, v.kind, "still paused once resumed")
}

// A delivery that has no room to park steps aside: beyond the parking
// room's bytes, or beyond its consumer's room.
func TestGateStepsAsideWithoutRoom(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Limits: map[string]kv.Limit{"email": {Concurrency: 1}}})
	b.g.room = 10
	tk := b.admitRun(t, newGateDelivery("d1"))
	b.admitParked(t, newGateDelivery("0123456789"))
	_, v := b.g.admit(newGateDelivery("x"), b.task)
	require.Equal(t, admitStepAside, v.kind)
	require.Equal(t, "email", v.limit.target)

	b.g.room = maxParkedBytes
	set := &shardSet{}
	for i := range 2 {
		d := &delivery{msg: gateMsg{data: []byte("y")}, set: set, flow: flowState{room: 1}}
		_, v = b.g.admit(d, b.task)
		if i == 0 {
			require.Equal(t, admitParked, v.kind)
			require.True(t, b.g.parkHeld(d))
			continue
		}
		require.Equal(t, admitStepAside, v.kind, "parked beyond its consumer's room")
	}
	tk.done()
}

// A slot lost (a renewal found it gone, or its trust ran out) is never
// handed on: the ticket no longer holds it, its holder is removed from
// AX_LIMITS, and the parked delivery gets a slot taken afresh. A handed
// slot lost while its delivery waited for a slot's turn is given back at
// its admission, which takes another.
func TestGateLostSlotIsNeverHandedOn(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Limits: map[string]kv.Limit{"email": {Concurrency: 1}}})
	tk := b.admitRun(t, newGateDelivery("d1"))
	d2 := newGateDelivery("d2")
	b.admitParked(t, d2)
	require.True(t, tk.holdsSlots())
	b.store.steal("email", tk.holder) // it expired, and another worker took it
	b.g.renewSlots(context.Background())
	require.False(t, tk.holdsSlots(), "a slot found gone is still trusted")
	tk.done()
	woken := b.nextWoken(t)
	require.Same(t, d2, woken)
	require.NotEqual(t, tk.holder, woken.flow.handed[0].holder, "the lost slot was handed on")
	require.Contains(t, b.store.releasedHolders(), tk.holder)
	require.Zero(t, b.g.stats.HandedOn.Load())

	// Handed on, then lost before its admission: a fresh slot.
	tk2 := b.admitRun(t, woken)
	d3 := newGateDelivery("d3")
	b.admitParked(t, d3)
	tk2.done()
	woken = b.nextWoken(t)
	require.Same(t, d3, woken)
	handed := woken.flow.handed[0]
	handed.hold.lose()
	b.store.steal("email", handed.holder)
	tk3 := b.admitRun(t, woken)
	require.NotEqual(t, handed.holder, tk3.slots[0].holder, "it runs on the lost slot")
	require.Equal(t, []string{tk3.slots[0].holder}, b.store.held("email"))
	tk3.done()
}

// A slot not renewed within its TTL (the worker frozen, or the server out
// of reach) stops being trusted at the end of its trust, on the worker's
// own clock, and is not handed on either.
func TestGateSlotTrustRunsOut(t *testing.T) {
	t.Parallel()
	const ttl = 120 * time.Millisecond // trusted for 100 ms from the acquire's send
	b := setupGate(t, ttl, kv.Limits{Limits: map[string]kv.Limit{"email": {Concurrency: 1}}})
	tk := b.admitRun(t, newGateDelivery("d1"))
	lost := make(chan error, 1)
	stop := tk.watchSlots(func(cause error) { lost <- cause })
	defer stop()
	d2 := newGateDelivery("d2")
	b.admitParked(t, d2)
	select {
	case cause := <-lost:
		require.ErrorIs(t, cause, ErrLimitSlotLost)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the slot's trust never ran out")
	}
	require.False(t, tk.holdsSlots())
	tk.done()
	woken := b.nextWoken(t)
	require.NotEqual(t, tk.holder, woken.flow.handed[0].holder, "a slot past its trust was handed on")
	require.Zero(t, b.g.stats.HandedOn.Load())
	b.g.returnHanded(woken)
}

// Slots given back by the other workers are taken for the deliveries
// parked here in one write to AX_LIMITS, as many as are free, and handed
// to the oldest; the rest stay parked.
func TestGateFillsFreedSlotsInOneWrite(t *testing.T) {
	t.Parallel()
	b := setupGate(t, time.Minute, kv.Limits{Limits: map[string]kv.Limit{"email": {Concurrency: 3}}})
	b.store.slots["email"] = []string{"w2/a", "w2/b", "w2/c"} // another worker holds them all
	var parked []*delivery
	for i := range 3 {
		d := newGateDelivery(fmt.Sprint("d", i))
		b.admitParked(t, d)
		parked = append(parked, d)
	}
	b.store.steal("email", "w2/a") // the other worker gives two back
	b.store.steal("email", "w2/b")
	writes := b.store.writeCount()
	b.g.unparkOldest() // the poll, or the watch of AX_LIMITS
	require.Same(t, parked[0], b.nextWoken(t))
	require.Same(t, parked[1], b.nextWoken(t))
	b.g.fills.Wait()
	require.Equal(t, writes+1, b.store.writeCount(), "not one write for the slots freed")
	require.Empty(t, b.woken)
	require.Equal(t, 1, b.parkedCount())
	require.Len(t, b.store.held("email"), 3)
	for _, d := range parked[:2] {
		tk := b.admitRun(t, d)
		tk.done() // handed on to the one still parked
	}
	require.Same(t, parked[2], b.nextWoken(t))
	b.g.returnHanded(parked[2])
	require.Equal(t, []string{"w2/c"}, b.store.held("email"))
}
