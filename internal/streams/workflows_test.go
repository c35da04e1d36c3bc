package streams_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// Each task comes before its parents, whatever the document's order.
func TestChildrenFirst(t *testing.T) {
	t.Parallel()
	var wf streams.WorkflowTasks
	require.NoError(t, json.Unmarshal([]byte(`{"id": "w", "tasks": [
		{"name": "mail", "after": ["ship", "invoice"]},
		{"name": "charge"},
		{"name": "ship", "after": ["charge"]},
		{"name": "invoice", "after": ["charge"]}]}`), &wf))
	order := wf.ChildrenFirst()
	require.ElementsMatch(t, []string{"mail", "charge", "ship", "invoice"}, order)
	for _, task := range wf.Tasks {
		for _, p := range task.After {
			require.Less(t, slices.Index(order, task.Name), slices.Index(order, p), "%s before its parent %s: %v", task.Name, p, order)
		}
	}
}

// A workflow's task ids, and a document's subject read back.
func TestWorkflowNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "order-42/ship", streams.WorkflowTaskID("order-42", "ship", false))
	require.Equal(t, "ship", streams.WorkflowTaskID("batch-1", "ship", true))
	n := streams.DefaultNames()
	subject := n.WorkflowSubject("acme", "order-42")
	require.Equal(t, "ax.submit.wf.acme.order-42.doc", subject)
	tenant, id, ok := n.ParseWorkflowSubject(subject)
	require.True(t, ok)
	require.Equal(t, []string{"acme", "order-42"}, []string{tenant, id})
	for _, bad := range []string{"ax.submit.wf.acme.order-42", "ax.submit.p2.acme.x.y", "ax.submit.wf.acme.a/b.doc"} {
		_, _, ok := n.ParseWorkflowSubject(bad)
		require.False(t, ok, bad)
	}
}
