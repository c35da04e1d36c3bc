package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// workflow.get answers a graph larger than one reply below max_payload:
// the first layers that fit, in layer order, "truncated", and the summary
// of every task. Before the cut, the reply was too large to send.
func TestWorkflowGetCutBelowMaxPayload(t *testing.T) {
	t.Parallel()
	b := setupSmall(t)
	ctx := context.Background()
	const pairs = 150
	wf := ax.NewWorkflow("wide")
	for i := range pairs { // a root and its child
		wf.Add(fmt.Sprintf("r%04d", i), ax.TaskSpec{Type: "x"})
		wf.Add(fmt.Sprintf("c%04d", i), ax.TaskSpec{Type: "x"}, fmt.Sprintf("r%04d", i))
	}
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	// Each task DEAD with a long error: the roots fit in one reply, not
	// the children beside them.
	for _, task := range wf.Tasks {
		_, _, err := b.Store.Create(ctx, &kv.Record{ID: wf.TaskID(task.Name), Tenant: ax.DefaultTenant, Type: "x", State: kv.StateDead,
			LastError: strings.Repeat("e", 500)}, kv.Actor{Action: "test"})
		require.NoError(t, err)
	}

	var reply admin.WorkflowGetReply
	require.NoError(t, b.call(t, admin.VerbWorkflowGet, admin.WorkflowRequest{ID: "wide"}, &reply))
	require.True(t, reply.Truncated)
	require.Greater(t, len(reply.Nodes), pairs, "every root, then children")
	require.Less(t, len(reply.Nodes), 2*pairs)
	for i, n := range reply.Nodes {
		require.Equal(t, map[bool]int{true: 0, false: 1}[i < pairs], n.Layer, "node %d (%s): the first layers first", i, n.Name)
	}
	require.Equal(t, 2*pairs, reply.Tasks)
	require.Equal(t, 2, reply.Layers)
	require.Equal(t, map[string]int{"DEAD": 2 * pairs}, reply.States, "every task counted")
	require.Equal(t, "FAILED", reply.State)
	require.Equal(t, []string{"r0000"}, reply.Nodes[pairs].After)
	require.Equal(t, []string{"r0000"}, reply.Nodes[pairs].WaitsFor)
	require.Equal(t, strings.Repeat("e", 500), reply.Nodes[0].LastError)
}
