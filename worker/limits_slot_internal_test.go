package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A slot is trusted from its first confirmation until the confirmed send
// time plus the TTL minus the margin; renewals move that on; once it has
// passed, or a renewal found the slot gone, the slot is lost for good: a
// later confirmation (a renewal sent before the loss, answered after it)
// does not revive it. Fails if a lost slot can be trusted again, which is
// what let a worker resumed from a freeze hand its expired slots on.
func TestSlotHoldTrust(t *testing.T) {
	t.Parallel()
	const ttl, margin = 10 * time.Second, 2 * time.Second
	t0 := time.Now()

	var h slotHold
	require.False(t, h.holds(t0), "trusted before any confirmation")
	require.False(t, h.holds(t0))
	h.confirm(t0, ttl, margin)
	require.True(t, h.holds(t0.Add(ttl-margin-time.Millisecond)))
	require.True(t, h.holds(t0))
	h.confirm(t0.Add(3*time.Second), ttl, margin) // a renewal
	require.True(t, h.holds(t0.Add(ttl-margin+time.Second)), "a renewal did not extend the trust")
	h.confirm(t0.Add(time.Second), ttl, margin) // an older confirmation answered late
	require.Equal(t, t0.Add(3*time.Second+ttl-margin), h.trustedUntil(), "a late confirmation shortened the trust")

	require.False(t, h.holds(t0.Add(3*time.Second+ttl-margin)), "trusted past its TTL")
	h.confirm(t0.Add(ttl), ttl, margin)
	require.False(t, h.holds(t0.Add(ttl)), "a confirmation revived a lapsed slot")
	require.False(t, h.holds(t0.Add(ttl)))
	require.True(t, h.trustedUntil().IsZero())

	var g slotHold
	g.confirm(t0, ttl, margin)
	called := 0
	g.notifyLost(func() { called++ })
	g.lose()
	require.Equal(t, 1, called)
	require.False(t, g.holds(t0), "trusted once found gone")
	g.confirm(t0, ttl, margin)
	require.False(t, g.holds(t0), "a confirmation revived a slot found gone")
	g.notifyLost(func() { called++ })
	require.Equal(t, 2, called, "a watch of a lost slot is not told at once")

	var nilHold *slotHold
	require.False(t, nilHold.holds(t0))
}
