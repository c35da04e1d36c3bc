package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func addWorkflow(root *cobra.Command, e *env) {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Submit a workflow (tasks with dependencies) and show one",
	}
	var publishOnly bool
	submit := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a workflow document (JSON; \"-\": standard input), all or nothing",
		Example: `  ax workflow submit order-42.json
  cat wf.json | ax workflow submit -

  {"id": "order-42", "tasks": [
    {"name": "charge", "task": {"type": "charge", "payload": "eyJhbW91bnQiOjQyfQ=="}},
    {"name": "ship",   "task": {"type": "ship"},  "after": ["charge"]},
    {"name": "mail",   "task": {"type": "mail"},  "after": ["charge"]}]}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := readPayload(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			var wf ax.Workflow
			dec := json.NewDecoder(strings.NewReader(string(data)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&wf); err != nil {
				return fmt.Errorf("%w: %s: %w", ax.ErrInvalidWorkflow, args[0], err)
			}
			if err := wf.Validate(); err != nil {
				return err
			}
			if !cmd.Flags().Changed("publish-only") && publishOnlyUser(e.userName()) {
				publishOnly = true
			}
			nc, js, err := e.connect("ax workflow submit", roleService)
			if err != nil {
				return err
			}
			defer nc.Close()
			client, err := e.submitClient(cmd.Context(), js, publishOnly)
			if err != nil {
				return err
			}
			info, err := client.SubmitWorkflow(cmd.Context(), &wf)
			if err != nil {
				// A refused publish (another tenant's subject) stored nothing.
				failed := e.submitFailed(cmd.Context(), ax.TaskInfo{ID: info.ID, Tenant: info.Tenant}, err)
				if _, maybe := failed.(maybeStoredError); maybe {
					return maybeStoredError{err: err, msg: fmt.Sprintf("%s; `ax workflow get %s --tenant %s` tells, and a submit again of the same document is safe", err, info.ID, info.Tenant)}
				}
				return failed
			}
			if e.jsonOut {
				return writeJSON(e.out, info)
			}
			dup := ""
			if info.Duplicate {
				dup = " (duplicate: the tenant already has a workflow of this id; nothing stored)"
			}
			fmt.Fprintf(e.out, "%s: %d tasks%s\n", info.ID, info.Tasks, dup)
			return nil
		},
	}
	submit.Flags().BoolVar(&publishOnly, "publish-only", false, "only publish the document, as a producer allowed only to submit does (default: true as the users service, core-service and producer-<tenant>)")
	var tenant string
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show a workflow: each task in dependency order, its state and what it waits for",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, js, err := e.connect("ax workflow get", roleOperator)
			if err != nil {
				return err
			}
			defer nc.Close()
			view, err := e.workflowView(cmd.Context(), js, tenant, args[0])
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, view)
			}
			view.print(e)
			return nil
		},
	}
	get.Flags().StringVar(&tenant, "tenant", ax.DefaultTenant, "tenant")
	var cancelTenant string
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel every task of a workflow that has not ended, those not released yet included",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, "workflow cancel", func(ctx context.Context, c *admin.Client) (*admin.WorkflowCancelReply, error) {
				return c.CancelWorkflow(ctx, admin.WorkflowRequest{ID: args[0], Tenant: cancelTenant})
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			fmt.Fprintf(e.out, "workflow %s: %d tasks cancelled (%d running, their workers told), %d had ended\n",
				args[0], len(reply.Cancelled), reply.Notified, len(reply.Ended))
			return nil
		},
	}
	cancel.Flags().StringVar(&cancelTenant, "tenant", ax.DefaultTenant, "tenant")
	var list admin.WorkflowListRequest
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the newest workflows with the states of their tasks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, "workflow ls", func(ctx context.Context, c *admin.Client) (*admin.WorkflowListReply, error) {
				return c.ListWorkflows(ctx, list)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			fmt.Fprintf(e.out, "%-24s  %-12s  %-9s  %6s  %-20s  %s\n", "ID", "TENANT", "STATE", "TASKS", "SUBMITTED", "TASK STATES")
			for _, w := range reply.Workflows {
				var parts []string
				for _, s := range []string{"WAITING", "READY", "RUNNING", "RETRYING", "PENDING", "PAUSED", "SUCCEEDED", "DEAD", "CANCELLED"} {
					if n := w.States[s]; n > 0 {
						parts = append(parts, fmt.Sprintf("%d %s", n, s))
					}
				}
				fmt.Fprintf(e.out, "%-24s  %-12s  %-9s  %6d  %-20s  %s\n", w.ID, w.Tenant, w.State, w.Tasks,
					w.SubmittedAt.UTC().Format(time.RFC3339), strings.Join(parts, ", "))
			}
			return nil
		},
	}
	ls.Flags().StringVar(&list.Tenant, "tenant", "", "only this tenant's workflows (default: every tenant's)")
	ls.Flags().IntVar(&list.Limit, "limit", 20, fmt.Sprintf("the newest this many (at most %d)", admin.MaxWorkflowListLimit))
	pause, resume := workflowPauseCommands(e)
	cmd.AddCommand(submit, get, cancel, ls, pause, resume)
	root.AddCommand(cmd)
}

// workflowView is a workflow with its tasks' states.
type workflowView struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Paused is set while the workflow is paused (ax workflow pause).
	Paused bool               `json:"paused,omitempty"`
	Tasks  []workflowTaskView `json:"tasks"`
}

type workflowTaskView struct {
	Name  string   `json:"name"`
	ID    string   `json:"id"`
	Type  string   `json:"type"`
	State kv.State `json:"state,omitempty"` // empty: not released yet
	After []string `json:"after,omitempty"`
	// WaitsFor are the parents that have not succeeded.
	WaitsFor []string `json:"waits_for,omitempty"`
	// Held says why a task not released yet will not be released as it
	// stands: a parent (or an ancestor) ended DEAD or CANCELLED under the
	// on_failure cancel policy. Empty while it only waits.
	Held  string `json:"held,omitempty"`
	Error string `json:"last_error,omitempty"`
}

// workflowView reads tenant's workflow id: its document, then each task's
// record.
func (e *env) workflowView(ctx context.Context, js jetstream.JetStream, tenant, id string) (*workflowView, error) {
	names, err := e.names()
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, names.WorkflowStream())
	if err != nil {
		return nil, fmt.Errorf("workflow %s: bind %s: %w", id, names.WorkflowStream(), err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, names.WorkflowSubject(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("workflow %s of tenant %s: not found", id, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	data, err := names.WorkflowDocument(ctx, stream, msg.Sequence, msg.Subject, msg.Header, msg.Data)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	var wf ax.Workflow
	if err := json.Unmarshal(data, &wf); err != nil {
		return nil, fmt.Errorf("workflow %s: its document does not decode: %w", id, err)
	}
	store, err := kv.NewStore(ctx, js, &kv.StoreConfig{Names: names})
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	view := &workflowView{ID: wf.ID, Tenant: tenant}
	if board, err := control.Open(ctx, js, names); err == nil { // else shown as not paused
		_, err := board.Get(ctx, control.WorkflowPausedKey(tenant, wf.ID))
		view.Paused = err == nil
	}
	state := map[string]kv.State{}
	held := map[string]bool{}
	for _, t := range topological(wf.Tasks) {
		tv := workflowTaskView{Name: t.Name, ID: wf.TaskID(t.Name), Type: t.Spec.Type, After: t.After}
		rec, _, err := store.Get(ctx, kv.Ref{Tenant: tenant, ID: tv.ID})
		switch {
		case errors.Is(err, kv.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("workflow %s: task %s: %w", id, t.Name, err)
		default:
			tv.State, tv.Error = rec.State, rec.LastError
		}
		state[t.Name] = tv.State
		for _, p := range t.After {
			if state[p] != kv.StateSucceeded {
				tv.WaitsFor = append(tv.WaitsFor, p)
			}
		}
		if tv.State == "" && wf.OnFailure != ax.ContinueDescendants {
			tv.Held = heldBy(t.After, state, held)
			held[t.Name] = tv.Held != ""
		}
		if tv.State == "" && tv.Held == "" && len(tv.WaitsFor) == 0 && view.Paused {
			tv.Held = "the workflow is paused"
		}
		view.Tasks = append(view.Tasks, tv)
	}
	return view, nil
}

// heldBy says why a task after parents is held back: the first parent
// that ended DEAD or CANCELLED, or is held itself.
func heldBy(parents []string, state map[string]kv.State, held map[string]bool) string {
	for _, p := range parents {
		switch {
		case state[p] == kv.StateDead:
			return "parent " + p + " is DEAD: replay it (ax dlq replay) to go on"
		case state[p] == kv.StateCancelled:
			return "parent " + p + " was cancelled"
		case held[p]:
			return "parent " + p + " is held"
		}
	}
	return ""
}

// topological orders tasks so that each comes after its parents, keeping
// the document's order otherwise.
func topological(tasks []ax.WorkflowTask) []ax.WorkflowTask {
	placed := make(map[string]bool, len(tasks))
	out := make([]ax.WorkflowTask, 0, len(tasks))
	for len(out) < len(tasks) {
		progress := false
		for _, t := range tasks {
			if placed[t.Name] || slices.ContainsFunc(t.After, func(p string) bool { return !placed[p] }) {
				continue
			}
			placed[t.Name], progress = true, true
			out = append(out, t)
		}
		if !progress { // a cycle (never stored): the rest as they are
			for _, t := range tasks {
				if !placed[t.Name] {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

func (v *workflowView) print(e *env) {
	counts := map[string]int{}
	width := 4
	for _, t := range v.Tasks {
		counts[stateName(t)]++
		width = max(width, len(t.Name))
	}
	var parts []string
	for _, s := range []string{"WAITING", "READY", "RUNNING", "RETRYING", "SUCCEEDED", "DEAD", "CANCELLED", "PENDING", "PAUSED"} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	paused := ""
	if v.Paused {
		paused = " (paused)"
	}
	fmt.Fprintf(e.out, "workflow %s (tenant %s)%s: %d tasks: %s\n", v.ID, v.Tenant, paused, len(v.Tasks), strings.Join(parts, ", "))
	for _, t := range v.Tasks {
		line := fmt.Sprintf("  %-*s  %-9s  %s", width, t.Name, stateName(t), t.Type)
		if len(t.After) > 0 {
			line += "  after " + strings.Join(t.After, ", ")
		}
		switch {
		case t.Held != "":
			line += "  (held: " + t.Held + ")"
		case len(t.WaitsFor) > 0 && t.State == "":
			line += "  (waits for " + strings.Join(t.WaitsFor, ", ") + ")"
		}
		if t.Error != "" {
			line += "  error: " + t.Error
		}
		fmt.Fprintln(e.out, line)
	}
}

// stateName is a task's state, WAITING before its release.
func stateName(t workflowTaskView) string {
	if t.State == "" {
		return "WAITING"
	}
	return string(t.State)
}

// workflowPauseCommands are `ax workflow pause` and `ax workflow resume`.
func workflowPauseCommands(e *env) (pause, resume *cobra.Command) {
	var tenant string
	pause = &cobra.Command{
		Use:   "pause ID",
		Short: "Release no further task of a workflow (its running tasks finish) until ax workflow resume",
		Long: `ax workflow pause marks a workflow paused: the leader releases none of its tasks
until ax workflow resume, which releases those that became due meanwhile. Its
tasks released before (waiting in a bucket, running, retrying) are left to run.
It answers once the leader has seen the pause (up to 5 s): no release of the
workflow is under way then, and none follows; "not confirmed by the leader yet"
says a release the leader had begun may still go out.
Pausing a paused workflow changes nothing; a workflow that has ended (SUCCEEDED,
FAILED, CANCELLED) is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, "workflow pause", func(ctx context.Context, c *admin.Client) (*admin.WorkflowPauseReply, error) {
				return c.PauseWorkflow(ctx, admin.WorkflowRequest{ID: args[0], Tenant: tenant})
			})
			if err != nil {
				return err
			}
			return printPause(e, reply)
		},
	}
	pause.Flags().StringVar(&tenant, "tenant", ax.DefaultTenant, "tenant")
	resume = &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused workflow: release the tasks that became due while it was paused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, "workflow resume", func(ctx context.Context, c *admin.Client) (*admin.WorkflowPauseReply, error) {
				return c.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: args[0], Tenant: tenant})
			})
			if err != nil {
				return err
			}
			return printPause(e, reply)
		},
	}
	resume.Flags().StringVar(&tenant, "tenant", ax.DefaultTenant, "tenant")
	return pause, resume
}

func printPause(e *env, reply *admin.WorkflowPauseReply) error {
	if e.jsonOut {
		return writeJSON(e.out, reply)
	}
	unseen := ""
	if reply.Paused && !reply.Confirmed {
		unseen = " (not confirmed by the leader yet: a release it had begun may still go out; ax workflow pause again tells whether it has seen it since)"
	}
	switch {
	case reply.Paused && reply.Changed:
		fmt.Fprintf(e.out, "workflow %s: paused%s\n", reply.ID, unseen)
	case reply.Paused:
		fmt.Fprintf(e.out, "workflow %s: paused already (since %s)%s\n", reply.ID, reply.PausedAt.UTC().Format(time.RFC3339), unseen)
	case reply.Changed:
		fmt.Fprintf(e.out, "workflow %s: resumed\n", reply.ID)
	default:
		fmt.Fprintf(e.out, "workflow %s: not paused\n", reply.ID)
	}
	return nil
}
