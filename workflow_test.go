package ax_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/stretchr/testify/require"
)

func spec(typ string) ax.TaskSpec { return ax.TaskSpec{Type: typ} }

// Chain and Group build the edges their names say.
func TestWorkflowBuilders(t *testing.T) {
	t.Parallel()
	wf := ax.NewWorkflow("order-42")
	wf.Chain(ax.Step{Name: "fetch", Spec: spec("fetch")}, ax.Step{Name: "parse", Spec: spec("parse")})
	wf.Group(ax.Step{Name: "thumb", Spec: spec("resize")}, ax.Step{Name: "full", Spec: spec("resize")}).
		Then(ax.Step{Name: "publish", Spec: spec("publish")})
	wf.Add("notify", spec("mail"), "publish", "parse")
	require.NoError(t, wf.Validate())
	after := map[string][]string{}
	for _, task := range wf.Tasks {
		after[task.Name] = task.After
	}
	require.Equal(t, map[string][]string{"fetch": nil, "parse": {"fetch"}, "thumb": nil, "full": nil,
		"publish": {"thumb", "full"}, "notify": {"publish", "parse"}}, after)
	require.Equal(t, "order-42/parse", wf.TaskID("parse"))

	data, err := json.Marshal(wf)
	require.NoError(t, err)
	var back ax.Workflow
	require.NoError(t, json.Unmarshal(data, &back))
	require.NoError(t, back.Validate())
	require.Equal(t, wf.Tasks, back.Tasks, "the JSON document is the same workflow")
}

// Each mistake is refused before anything is stored, with an error that
// names the task and what is wrong.
func TestWorkflowChecks(t *testing.T) {
	t.Parallel()
	wide := ax.NewWorkflow("wide")
	var parents []string
	for i := range ax.MaxParents + 1 {
		name := fmt.Sprintf("c%d", i)
		wide.Add(name, spec("x"))
		parents = append(parents, name)
	}
	wide.Add("join", spec("x"), parents...)
	huge := ax.NewWorkflow("huge").Add("a", ax.TaskSpec{Type: "x", Payload: make([]byte, ax.MaxWorkflowBytes)})
	many := ax.NewWorkflow("many")
	for i := range ax.MaxWorkflowTasks + 1 {
		many.Add(fmt.Sprint(i), spec("x"))
	}
	for _, c := range []struct {
		name string
		wf   *ax.Workflow
		want string
	}{
		{"no id", ax.NewWorkflow("").Add("a", spec("x")), "id:"},
		{"a slash in the id", ax.NewWorkflow("a/b").Add("a", spec("x")), "contains '/'"},
		{"no task", ax.NewWorkflow("w"), "no task"},
		{"no name", ax.NewWorkflow("w").Add("", spec("x")), "task 0 has no name"},
		{"a name twice", ax.NewWorkflow("w").Add("a", spec("x")).Add("a", spec("x")), `task "a" is added twice`},
		{"a bad name", ax.NewWorkflow("w").Add("a b", spec("x")), `task "a b": invalid task: ID`},
		{"its own id", ax.NewWorkflow("w").Add("a", ax.TaskSpec{ID: "mine", Type: "x"}), `sets its id "mine"`},
		{"another tenant", &ax.Workflow{ID: "w", Tenant: "acme", Tasks: []ax.WorkflowTask{{Name: "a", Spec: ax.TaskSpec{Type: "x", Tenant: "other"}}}}, `of tenant "other"`},
		{"a bad spec", ax.NewWorkflow("w").Add("a", ax.TaskSpec{Type: "x", Priority: "p9"}), `task "a": invalid task: Priority`},
		{"a missing parent", ax.NewWorkflow("w").Add("a", spec("x"), "ghost"), `task "a" waits for "ghost", which is not a task`},
		{"itself", ax.NewWorkflow("w").Add("a", spec("x"), "a"), `task "a" waits for itself`},
		{"a parent twice", ax.NewWorkflow("w").Add("a", spec("x")).Add("b", spec("x"), "a", "a"), `waits for "a" twice`},
		{"a cycle", ax.NewWorkflow("w").Add("a", spec("x"), "c").Add("b", spec("x"), "a").Add("c", spec("x"), "b").Add("d", spec("x")), "a cycle: a -> c -> b -> a"},
		{"a bad policy", &ax.Workflow{ID: "w", OnFailure: "retry", Tasks: []ax.WorkflowTask{{Name: "a", Spec: spec("x")}}}, `on_failure "retry"`},
		{"too many parents", wide, fmt.Sprintf(`task "join" waits for %d tasks, more than %d`, ax.MaxParents+1, ax.MaxParents)},
		{"too large", huge, "bytes, more than"},
		{"too many tasks", many, fmt.Sprintf("%d tasks, more than", ax.MaxWorkflowTasks+1)},
		{"a bad trace", &ax.Workflow{ID: "w", Trace: map[string]string{"traceparent": "00-0-0-01"}, Tasks: []ax.WorkflowTask{{Name: "a", Spec: spec("x")}}}, `trace: "traceparent"="00-0-0-01" is not`},
		{"a trace header of another name", &ax.Workflow{ID: "w", Trace: map[string]string{"Ax-Note": "x"}, Tasks: []ax.WorkflowTask{{Name: "a", Spec: spec("x")}}}, `trace: "Ax-Note"`},
		{"a task's bad traceparent", ax.NewWorkflow("w").Add("a", ax.TaskSpec{Type: "x", Headers: map[string]string{"traceparent": "garbage"}}), `header "traceparent": "garbage" is not a well-formed`},
	} {
		err := c.wf.Validate()
		require.ErrorIs(t, err, ax.ErrInvalidWorkflow, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
		require.True(t, strings.HasPrefix(err.Error(), "invalid workflow"), c.name)
	}
}

// A chain as long as a workflow holds is checked without running out of
// stack, and a cycle through all of it is found.
func TestWorkflowLongChain(t *testing.T) {
	t.Parallel()
	wf := ax.NewWorkflow("long")
	steps := make([]ax.Step, ax.MaxWorkflowTasks)
	for i := range steps {
		steps[i] = ax.Step{Name: fmt.Sprint(i), Spec: spec("x")}
	}
	wf.Chain(steps...)
	require.NoError(t, wf.Validate())
	wf.Tasks[0].After = []string{fmt.Sprint(ax.MaxWorkflowTasks - 1)}
	require.ErrorContains(t, wf.Validate(), "a cycle: 0 -> ")
}
