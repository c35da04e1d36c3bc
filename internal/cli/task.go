package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/spf13/cobra"
)

// tenantFlag adds --tenant to a command on one task: a task id belongs to
// its tenant, and an id that tasks of several tenants have needs it.
func tenantFlag(cmd *cobra.Command, tenant *string) *cobra.Command {
	cmd.Flags().StringVar(tenant, "tenant", "", "the task's tenant (needed when tasks of several tenants have the id, and with --unseen)")
	return cmd
}

func addTask(root *cobra.Command, e *env) {
	task := &cobra.Command{Use: "task", Short: "Inspect and act on one task (through the management API)"}
	var getTenant, trailTenant string
	task.AddCommand(tenantFlag(&cobra.Command{
		Use:   "get ID",
		Short: "Show a task's record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTaskGet, func(ctx context.Context, api *admin.Client) (*admin.TaskReply, error) {
				return api.Get(ctx, admin.TaskRequest{ID: args[0], Tenant: getTenant})
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply.Task)
			}
			printRecord(e.out, reply.Task)
			return nil
		},
	}, &getTenant), tenantFlag(&cobra.Command{
		Use:   "trail ID",
		Short: "Show every state change of a task",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTaskTrail, func(ctx context.Context, api *admin.Client) (*admin.TrailReply, error) {
				return api.Trail(ctx, admin.TaskRequest{ID: args[0], Tenant: trailTenant})
			})
			if err != nil {
				return err
			}
			if reply.Truncated {
				fmt.Fprintf(e.errOut, "the trail was cut to fit the server's max_payload: its first move and the newest shown, %d moves between left out\n", reply.Omitted)
			}
			if e.jsonOut {
				return writeJSON(e.out, reply.Trail)
			}
			printTrail(e.out, reply.Trail)
			return nil
		},
	}, &trailTenant))
	for _, a := range []struct {
		verb, use, short string
		do               func(*admin.Client, context.Context, admin.TaskRequest) (*admin.TaskReply, error)
	}{
		{admin.VerbTaskCancel, "cancel ID", "Cancel a task: it never starts, or its running handler's context is cancelled; never retried", (*admin.Client).Cancel},
		{admin.VerbTaskPause, "pause ID", "Hold a waiting task (PENDING, READY, RETRYING) with its payload until resumed", (*admin.Client).Pause},
		{admin.VerbTaskResume, "resume ID", "Put a PAUSED task back in its bucket", (*admin.Client).Resume},
	} {
		var unseen bool
		var tenant string
		cmd := &cobra.Command{
			Use:   a.use,
			Short: a.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				reply, err := callAdmin(cmd.Context(), e, a.verb, func(ctx context.Context, api *admin.Client) (*admin.TaskReply, error) {
					return a.do(api, ctx, admin.TaskRequest{ID: args[0], Tenant: tenant, Unseen: unseen})
				})
				if err != nil {
					return err
				}
				return e.printAction(reply)
			},
		}
		if a.verb != admin.VerbTaskResume {
			cmd.Flags().BoolVar(&unseen, "unseen", false, "the task was published but no worker has seen it: write its record first (needs --tenant)")
		}
		task.AddCommand(tenantFlag(cmd, &tenant))
	}
	var reprioritizeTenant string
	task.AddCommand(tenantFlag(&cobra.Command{
		Use:   "reprioritize ID PRIORITY",
		Short: "Move a READY task to another priority bucket (p0..p4)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePriority(args[1])
			if err != nil {
				return err
			}
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTaskReprioritize, func(ctx context.Context, api *admin.Client) (*admin.TaskReply, error) {
				return api.Reprioritize(ctx, admin.ReprioritizeRequest{ID: args[0], Tenant: reprioritizeTenant, Priority: p})
			})
			if err != nil {
				return err
			}
			return e.printAction(reply)
		},
	}, &reprioritizeTenant))
	addTaskResult(task, e)
	root.AddCommand(task)
}

// parsePriority reads "p2" or "2".
func parsePriority(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		s = "p" + strconv.Itoa(n)
	}
	return streams.ParsePriority(strings.ToLower(s))
}

// adminCallTimeout bounds one management API call of the CLI.
const adminCallTimeout = 60 * time.Second

// callAdmin makes one management API call (verb names the connection) with the
// connection flags: do gets a client of the deployment and a context bounded by [adminCallTimeout].
func callAdmin[R any](ctx context.Context, e *env, verb string, do func(context.Context, *admin.Client) (*R, error)) (*R, error) {
	names, err := e.names()
	if err != nil {
		return nil, err
	}
	nc, _, err := e.connect("ax "+verb, roleOperator)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	return do(ctx, admin.NewClient(nc, names))
}

func (e *env) printAction(reply *admin.TaskReply) error {
	if e.jsonOut {
		return writeJSON(e.out, reply)
	}
	m := reply.Task.LastMove()
	from := string(m.From)
	if from == "" {
		from = "(new record)"
	}
	fmt.Fprintf(e.out, "%s of %s: %s -> %s (%s, generation %d, %s)", reply.Task.ID, reply.Task.Tenant, from, m.To, m.Action, reply.Task.Gen, priorityText(reply.Task.Priority))
	switch {
	case reply.Notified:
		fmt.Fprint(e.out, "; worker notified")
	case reply.Redispatched:
		fmt.Fprint(e.out, "; message re-dispatched")
	}
	fmt.Fprintln(e.out)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printRecord(w io.Writer, r *kv.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("ID", r.ID)
	row("State", r.State)
	if from := r.WaitsAsideFrom(); from != "" {
		row("Waiting", asideText(r, from))
	}
	row("Type", r.Type)
	row("Tenant", r.Tenant)
	row("Key", r.Key)
	row("Priority", priorityText(r.Priority))
	if r.RunAt != nil {
		row("Run at", r.RunAt.Format(time.RFC3339Nano))
	}
	if r.MaxAttempts == 0 { // set by the worker that first claims it
		row("Attempt", "not started (attempts and timeout: the worker's defaults unless set)")
	} else {
		row("Attempt", fmt.Sprintf("%d of %d", r.Attempt, r.MaxAttempts))
		row("Timeout", durationText(time.Duration(r.Timeout)))
	}
	if r.Lost > 0 {
		row("Lost attempts", fmt.Sprintf("%d (its worker crashed, froze or was cut off)", r.Lost))
	}
	row("Generation", r.Gen)
	if r.StreamSeq != 0 {
		row("Message", fmt.Sprintf("%s sequence %d", cmp.Or(r.Stream, fmt.Sprintf("the %s bucket", priorityText(r.Priority))), r.StreamSeq))
	}
	if r.Worker != "" {
		row("Worker", r.Worker)
	}
	row("Created", r.CreatedAt.Format(time.RFC3339Nano))
	row("Updated", r.UpdatedAt.Format(time.RFC3339Nano))
	if r.StartedAt != nil {
		row("Started", r.StartedAt.Format(time.RFC3339Nano))
	}
	if r.FinishedAt != nil {
		row("Finished", r.FinishedAt.Format(time.RFC3339Nano))
	}
	if r.Progress != nil {
		row("Progress", fmt.Sprintf("%s (at %s)", progressText(r.Progress), r.Progress.At.Format(time.RFC3339Nano)))
	}
	if r.State == kv.StateSucceeded {
		row("Result", resultText(r.Result))
	}
	if r.LastError != "" {
		row("Last error", r.LastError)
	}
	if r.DLQSeq != 0 {
		row("Dead letter", fmt.Sprintf("AX_DLQ sequence %d", r.DLQSeq))
	}
	_ = tw.Flush()
}

// asideText says why a PENDING task that waits aside in AX_DELAYED
// ([kv.Record.WaitsAsideFrom]) waits there, and when it comes back: it is
// still a READY task (or a retry) held back, not a delayed one.
func asideText(r *kv.Record, from kv.State) string {
	what := "a READY task"
	if from == kv.StateRetrying {
		what = "a retry (its backoff over)"
	}
	if r.WaitsPausedAside() {
		return fmt.Sprintf("aside in AX_DELAYED: %s whose type or tenant is paused; READY again once the pause ends (or at its run time)", what)
	}
	return fmt.Sprintf("aside in AX_DELAYED: %s held back by a concurrency or rate limit; READY again at its run time", what)
}

func printTrail(w io.Writer, trail []kv.Move) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tFROM\tTO\tWORKER\tACTION\tTOOK\tERROR")
	for _, m := range trail {
		from := string(m.From)
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.At.Format("15:04:05.000000"), from, m.To, dash(m.Worker), dash(m.Action), durationText(time.Duration(m.Took)), m.Error)
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
