package worker

import (
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// A task steps aside for about as long as the deliveries parked ahead of it
// take to start at the rate its limit's tasks start here: it comes back as
// the parking room empties. With no start seen yet, the wait doubles with
// each earlier step aside. Always within asideMin and asideMax (plus up to a
// quarter at random).
func TestAsideWaitFollowsTheDrain(t *testing.T) {
	g := &gate{}
	conc := boundLimit{target: "partner", limit: kv.Limit{Concurrency: 10}}
	within := func(t *testing.T, d, want time.Duration) {
		t.Helper()
		require.GreaterOrEqual(t, d, want)
		require.LessOrEqual(t, d, want+want/4)
	}
	within(t, g.asideWait(conc, 0), asideFirst)
	within(t, g.asideWait(conc, 2), 4*asideFirst)
	within(t, g.asideWait(conc, 10), asideMax)

	g.parked = map[string][]*delivery{"partner": make([]*delivery, 99)}
	g.starts = map[string]*startMeter{"partner": {interval: 20 * time.Millisecond}}
	within(t, g.asideWait(conc, 5), 100*20*time.Millisecond) // the 99 ahead and itself
	g.parked["partner"] = nil
	within(t, g.asideWait(conc, 5), asideMin)
	g.starts["partner"].interval = time.Minute
	within(t, g.asideWait(conc, 0), asideMax)

	// A rate limit starts no faster than its rate, whatever was seen here.
	rate := boundLimit{target: "sms", limit: kv.Limit{Rate: 10}}
	g.parked[rateParkKey("sms")] = make([]*delivery, 19)
	within(t, g.asideWait(rate, 0), 2*time.Second)
	g.starts["sms"] = &startMeter{interval: time.Millisecond}
	within(t, g.asideWait(rate, 0), 2*time.Second)
}

// The meter of a limit's starts follows their pace, and an idle spell
// counts at most asideMax.
func TestStartMeterFollowsThePace(t *testing.T) {
	g := &gate{}
	bound := []boundLimit{{target: "partner", limit: kv.Limit{Concurrency: 1}}, {target: "none", limit: kv.Limit{Weight: 2}}}
	g.noteStarts(bound)
	require.NotContains(t, g.starts, "none", "a weight is not a limit on starts")
	m := g.starts["partner"]
	m.last = time.Now().Add(-time.Hour)
	g.noteStarts(bound)
	require.Equal(t, asideMax, m.interval.Round(time.Second))
	for range 50 {
		m.last = time.Now().Add(-10 * time.Millisecond) // as if the last start was 10 ms ago
		g.noteStarts(bound)
	}
	require.Less(t, m.interval, 200*time.Millisecond)
}
