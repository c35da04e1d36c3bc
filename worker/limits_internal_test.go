package worker

import (
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// The compiled limits match a task by its type, its tenant and its key's
// patterns; targets a worker cannot read are ignored and named; nothing
// configured compiles to nil (no check, no I/O).
func TestCompileFlow(t *testing.T) {
	t.Parallel()
	table, ignored := compileFlow(kv.Limits{})
	require.Nil(t, table)
	require.Empty(t, ignored)

	table, ignored = compileFlow(kv.Limits{
		Limits: map[string]kv.Limit{
			"email":       {Concurrency: 2},
			"tenant:acme": {Rate: 5},
			"key:order-*": {Concurrency: 1},
			"a.b":         {Concurrency: 1}, // not a target
			"report":      {Burst: 3},       // not a limit
			"tenant:big":  {Weight: 4},      // a share, no bound
			"tenant:both": {Concurrency: 3, Weight: 2},
			"fax":         {Rate: 1, Weight: 2},
			"key:k*":      {Weight: 2}, // a weight of a key pattern: not valid
		},
		Paused: map[string]kv.Pause{"resize": {At: time.Now()}, "tenant:globex": {At: time.Now()}, "key:x": {At: time.Now()}},
	})
	require.ElementsMatch(t, []string{"a.b", "report", "key:k*", "paused key:x"}, ignored)
	require.Equal(t, groupWeights{tenants: map[string]int{"big": 4, "both": 2}, types: map[string]int{"fax": 2}}, table.weights)
	require.Empty(t, table.match("email2", "big", ""), "a weight alone holds no task back")
	require.Len(t, table.match("email2", "both", ""), 1)
	require.True(t, table.paused("resize", "acme"))
	require.True(t, table.paused("email", "globex"))
	require.False(t, table.paused("email", "acme"))

	targets := func(bound []boundLimit) []string {
		var out []string
		for _, b := range bound {
			out = append(out, b.target)
		}
		return out
	}
	require.Equal(t, []string{"email", "tenant:acme", "key:order-*"}, targets(table.match("email", "acme", "order-7")))
	require.Equal(t, []string{"key:order-*"}, targets(table.match("sms", "initech", "order-")))
	require.Empty(t, table.match("sms", "initech", "invoice-1"))
}
