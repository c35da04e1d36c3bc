package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The task path's operations share a context whose deadline is between
// opTimeout and opTimeout+opShare away, never nearer: a busy worker makes
// one per opShare, not one per operation.
func TestOperationContextsAreSharedAndBounded(t *testing.T) {
	var ops opContexts
	opCtx := ops.get
	for range 3 {
		before := time.Now()
		ctx := opCtx()
		deadline, ok := ctx.Deadline()
		require.True(t, ok)
		require.False(t, deadline.Before(before.Add(opTimeout)), "deadline %s is nearer than opTimeout", time.Until(deadline))
		require.False(t, deadline.After(time.Now().Add(opTimeout+opShare)), "deadline %s is beyond opTimeout+opShare", time.Until(deadline))
		require.NoError(t, ctx.Err())
		time.Sleep(opShare / 3)
	}
	shared := false
	for range 3 { // a refresh may fall between two calls, not between every two
		shared = shared || opCtx() == opCtx()
	}
	require.True(t, shared, "one context for the operations of one moment")
}
