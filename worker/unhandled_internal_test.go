package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A put-back's delay doubles from its first delivery to its cap; with no
// live peer for the type, no put-back is shorter than the tasks put back
// lately allow at unhandledRedeliveries a second.
func TestUnhandledDelay(t *testing.T) {
	t.Parallel()
	require.Equal(t, 250*time.Millisecond, unhandledDelay(1, false, 1))
	require.Equal(t, 500*time.Millisecond, unhandledDelay(2, false, 1))
	require.Equal(t, 10*time.Second, unhandledDelay(9, false, 1))
	require.Equal(t, 10*time.Second, unhandledDelay(9, false, 500), "500 tasks at 10 s: 50 a second")
	require.Equal(t, 10*time.Second, unhandledDelay(1, false, 500), "paced from the first put-back")
	require.Equal(t, 30*time.Second, unhandledDelay(9, false, 1500))
	require.Equal(t, 200*time.Second, unhandledDelay(1000, false, maxUnhandledTracked))
	require.Equal(t, 5*time.Millisecond, unhandledDelay(1, true, 1500))
	require.Equal(t, time.Second, unhandledDelay(30, true, 1500), "a peer relieves the worker: the short cap")
}

// The backlog counts distinct tasks put back within unhandledMemory, at
// most maxUnhandledTracked.
func TestUnhandledBacklog(t *testing.T) {
	t.Parallel()
	var u unhandledTypes
	now := time.Now()
	require.Equal(t, 1, u.backlog("a", now))
	require.Equal(t, 1, u.backlog("a", now.Add(time.Second)), "the same task twice")
	require.Equal(t, 2, u.backlog("b", now.Add(2*time.Second)))
	require.Equal(t, 1, u.backlog("c", now.Add(unhandledMemory+3*time.Second)), "a and b forgotten")
	for i := range maxUnhandledTracked + 10 {
		u.backlog(fmt.Sprint(i), now.Add(unhandledMemory+4*time.Second))
	}
	require.Equal(t, maxUnhandledTracked, u.backlog("last", now.Add(unhandledMemory+5*time.Second)))
}
