package worker

import (
	"testing"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/stretchr/testify/require"
)

// A task steps aside for about as long as the deliveries parked ahead of it
// take to start at the rate its limit's tasks start here: it comes back as
// the parking room empties. With no start seen yet, the wait doubles with
// each earlier step aside. Always within asideMin and asideMax (plus up to a
// quarter at random).
func TestAsideWaitFollowsTheDrain(t *testing.T) {
	w := &Worker{}
	conc := boundLimit{target: "partner", limit: kv.Limit{Concurrency: 10}}
	within := func(t *testing.T, d, want time.Duration) {
		t.Helper()
		require.GreaterOrEqual(t, d, want)
		require.LessOrEqual(t, d, want+want/4)
	}
	within(t, w.asideWait(conc, 0), asideFirst)
	within(t, w.asideWait(conc, 2), 4*asideFirst)
	within(t, w.asideWait(conc, 10), asideMax)

	w.limits.parked = map[string][]*delivery{"partner": make([]*delivery, 99)}
	w.limits.starts = map[string]*startMeter{"partner": {interval: 20 * time.Millisecond}}
	within(t, w.asideWait(conc, 5), 100*20*time.Millisecond) // the 99 ahead and itself
	w.limits.parked["partner"] = nil
	within(t, w.asideWait(conc, 5), asideMin)
	w.limits.starts["partner"].interval = time.Minute
	within(t, w.asideWait(conc, 0), asideMax)

	// A rate limit starts no faster than its rate, whatever was seen here.
	rate := boundLimit{target: "sms", limit: kv.Limit{Rate: 10}}
	w.limits.parked[rateParkKey("sms")] = make([]*delivery, 19)
	within(t, w.asideWait(rate, 0), 2*time.Second)
	w.limits.starts["sms"] = &startMeter{interval: time.Millisecond}
	within(t, w.asideWait(rate, 0), 2*time.Second)
}

// The meter of a limit's starts follows their pace, and an idle spell
// counts at most asideMax.
func TestStartMeterFollowsThePace(t *testing.T) {
	w := &Worker{}
	bound := []boundLimit{{target: "partner", limit: kv.Limit{Concurrency: 1}}, {target: "none", limit: kv.Limit{Weight: 2}}}
	w.noteStarts(bound)
	require.NotContains(t, w.limits.starts, "none", "a weight is not a limit on starts")
	m := w.limits.starts["partner"]
	m.last = time.Now().Add(-time.Hour)
	w.noteStarts(bound)
	require.Equal(t, asideMax, m.interval.Round(time.Second))
	for range 50 {
		m.last = time.Now().Add(-10 * time.Millisecond) // as if the last start was 10 ms ago
		w.noteStarts(bound)
	}
	require.Less(t, m.interval, 200*time.Millisecond)
}
