package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/denied"
	"github.com/spf13/cobra"
)

func addCron(root *cobra.Command, e *env) {
	group := &cobra.Command{Use: "cron", Short: "Manage periodic tasks (the leader submits one task per scheduled time)"}
	var t ax.TaskSpec
	var payload, priority string
	add := &cobra.Command{
		Use:   "add NAME SPEC",
		Short: "Add or replace a cron job",
		Long: `SPEC is a cron line in UTC of 5 fields (minute hour day-of-month month day-of-week),
6 fields (seconds first), or a descriptor: @hourly, @daily, @weekly, @monthly,
@every 30s. Each scheduled time yields exactly one task, with id
cron-<NAME>-<unix seconds>, across leader changes.`,
		Example: `  ax cron add nightly-report "0 3 * * *" --type echo --payload report
  ax cron add heartbeat "@every 10s" --type sleep --payload '{"ms":5}' --priority p1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePriorityFlag(priority)
			if err != nil {
				return err
			}
			t.Priority, t.Payload = ax.PriorityOf(p), []byte(payload)
			client, done, err := e.client(cmd, "ax cron")
			if err != nil {
				return cronRefusal(cmd.Context(), err)
			}
			defer done()
			job, err := client.AddCron(cmd.Context(), ax.CronJob{Name: args[0], Spec: args[1], Task: t})
			if err != nil {
				return cronRefusal(cmd.Context(), err)
			}
			if e.jsonOut {
				return writeJSON(e.out, job)
			}
			fmt.Fprintf(e.out, "cron %s added; next run %s\n", job.Name, job.Next.Format(time.RFC3339))
			return nil
		},
	}
	f := add.Flags()
	f.StringVar(&t.Type, "type", "", "task type (handler name); required")
	f.StringVar(&payload, "payload", "", "task payload")
	f.StringVarP(&priority, "priority", "p", string(ax.DefaultPriority), "priority p0 (highest) .. p4")
	f.StringVar(&t.Tenant, "tenant", ax.DefaultTenant, "tenant")
	f.DurationVar(&t.Timeout, "timeout", 0, "timeout of one attempt (default: the worker's)")
	f.IntVar(&t.MaxAttempts, "max-attempts", 0, "attempts before a task is dead (default: the worker's)")
	f.BoolVar(&t.Core, "core", false, "core tasks, published on ax.core.p<N>.… (needs that permission): accepted while the bucket refuses others")
	_ = add.MarkFlagRequired("type")

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List cron jobs with their last and next run",
		Long: `List the cron jobs with their last and next run, read through the management API
(the control verb, as the dashboard reads them), so that the operator user may list them;
adding and removing them writes the control bucket, which only the scheduler user may.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbControl, func(ctx context.Context, api *admin.Client) (*admin.ControlReply, error) {
				return api.Control(ctx)
			})
			if err != nil {
				return err
			}
			jobs := []ax.CronJob{}
			for _, entry := range reply.Entries {
				name, ok := ax.CronJobName(entry.Key)
				if !ok {
					continue
				}
				var job ax.CronJob
				if err := json.Unmarshal(entry.Value, &job); err != nil {
					return fmt.Errorf("cron job %s: unreadable record: %w", name, err)
				}
				jobs = append(jobs, job)
			}
			if e.jsonOut {
				return writeJSON(e.out, jobs)
			}
			w := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSPEC\tTYPE\tTENANT\tPRIORITY\tLAST\tNEXT")
			for _, j := range jobs {
				last := "-"
				if !j.Last.IsZero() {
					last = j.Last.UTC().Format(time.RFC3339)
				}
				level, _ := j.Task.Priority.Level()
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Spec, j.Task.Type, cmp.Or(j.Task.Tenant, ax.DefaultTenant),
					priorityText(level), last, j.Next.UTC().Format(time.RFC3339))
			}
			return w.Flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a cron job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := e.client(cmd, "ax cron")
			if err != nil {
				return cronRefusal(cmd.Context(), err)
			}
			defer done()
			if err := client.RemoveCron(cmd.Context(), args[0]); err != nil {
				return cronRefusal(cmd.Context(), err)
			}
			fmt.Fprintf(e.out, "cron %s removed\n", args[0])
			return nil
		},
	}
	group.AddCommand(add, ls, rm)
	root.AddCommand(group)
}

// cronWriteHint is what a user refused ax cron add or rm does.
const cronWriteHint = "cron jobs are control state: ax cron add and rm run as the scheduler user; ax cron ls as the operator"

// cronRefusal gives the refusal that ended a cron write, in err or as the
// cause of ctx, the hint of [cronWriteHint], and returns err.
func cronRefusal(ctx context.Context, err error) error {
	for _, e := range []error{err, context.Cause(ctx)} {
		var d *denied.Error
		if errors.As(e, &d) {
			d.Hint = cronWriteHint
		}
	}
	return err
}

// client connects, opens the deployment and returns its client and a
// function that closes both.
func (e *env) client(cmd *cobra.Command, name string) (*ax.Client, func(), error) {
	nc, js, err := e.connect(name, roleScheduler) // cron records are control state
	if err != nil {
		return nil, nil, err
	}
	dep, err := e.openDeployment(cmd.Context(), js, deploy.Options{})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	client, err := dep.Client(cmd.Context(), nil)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return client, func() { _ = client.Close(); nc.Close() }, nil
}
