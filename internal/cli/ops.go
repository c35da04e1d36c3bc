package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/spf13/cobra"
)

// addOps adds the operator commands on many tasks: tasks, dlq, stats, workers.
func addOps(root *cobra.Command, e *env) {
	var batch admin.BatchCancelRequest
	var states []string
	tasks := &cobra.Command{Use: "tasks", Short: "Act on many tasks at once"}
	cancel := &cobra.Command{
		Use:   "cancel",
		Short: "Cancel every task matching --type, --tenant and --state (try --dry-run first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			batch.States = nil
			for _, s := range states {
				batch.States = append(batch.States, kv.State(strings.ToUpper(s)))
			}
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTasksCancel, func(ctx context.Context, api *admin.Client) (*admin.BatchCancelReply, error) {
				return api.CancelMatching(ctx, batch)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			if reply.DryRun {
				fmt.Fprintf(e.out, "%d tasks match (dry run: nothing cancelled)\n", reply.Matched)
			} else {
				fmt.Fprintf(e.out, "%d tasks match, %d cancelled\n", reply.Matched, reply.Cancelled)
			}
			for _, ref := range reply.Tasks {
				fmt.Fprintf(e.out, "  %s\t%s\n", ref.Tenant, ref.ID)
			}
			if len(reply.Tasks) < reply.Matched {
				fmt.Fprintf(e.out, "  … and %d more\n", reply.Matched-len(reply.Tasks))
			}
			for task, why := range reply.Failed {
				fmt.Fprintf(e.out, "  not cancelled %s: %s\n", task, why)
			}
			if reply.FailedCount > len(reply.Failed) {
				fmt.Fprintf(e.out, "  (%d more not cancelled: the reply was cut to fit the server's max_payload)\n", reply.FailedCount-len(reply.Failed))
			}
			printUnreadable(e, reply.Unreadable)
			return nil
		},
	}
	fs := cancel.Flags()
	fs.StringVar(&batch.Type, "type", "", "task type")
	fs.StringVar(&batch.Tenant, "tenant", "", "tenant")
	fs.StringSliceVar(&states, "state", nil, "states (repeat or comma separate): PENDING, READY, RUNNING, RETRYING, PAUSED")
	fs.BoolVar(&batch.DryRun, "dry-run", false, "count the matching tasks, cancel nothing")
	tasks.AddCommand(cancel, tasksListCommand(e))
	root.AddCommand(tasks, dlqCommand(e), statsCommand(e), workersCommand(e), rejectsCommand(e))
}

// tasksListCommand is `ax tasks ls`: the management API's tasks.list.
func tasksListCommand(e *env) *cobra.Command {
	var req admin.TasksListRequest
	var states []string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List tasks, most recently updated first, filtered by --state, --type, --tenant, a page at a time",
		Long: `List the task records matching --state, --type, --tenant and --id-prefix (none: every task),
most recently updated first, at most --limit (default 100, at most 1000) per page. When more follow,
the last line gives the --after cursor of the next page (run the command again with it and the
same filters). Each page is one scan of the task bucket by the management API (tasks.list,
docs/API.md); --json prints its reply as is, its "next" being the cursor.`,
		Example: `  ax tasks ls --state dead,retrying --tenant acme
  ax tasks ls --type email --limit 20 --json
  ax tasks ls --type email --limit 20 --after 1796613098661679000/order-42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.States = nil
			for _, s := range states {
				req.States = append(req.States, kv.State(strings.ToUpper(strings.TrimSpace(s))))
			}
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTasksList, func(ctx context.Context, api *admin.Client) (*admin.TasksListReply, error) {
				return api.List(ctx, req)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTENANT\tTYPE\tPRIORITY\tSTATE\tATTEMPT\tUPDATED\tLAST ERROR")
			for _, r := range reply.Tasks {
				attempt := "-"
				if r.MaxAttempts > 0 {
					attempt = fmt.Sprintf("%d/%d", r.Attempt, r.MaxAttempts)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Tenant, r.Type, priorityText(r.Priority), r.State, attempt,
					r.UpdatedAt.UTC().Format(time.RFC3339), dash(cutText(r.LastError, 60)))
			}
			_ = tw.Flush()
			fmt.Fprintf(e.out, "%d of %d tasks\n", len(reply.Tasks), reply.Matched)
			if reply.Truncated {
				fmt.Fprintln(e.out, "the reply was cut to fit the server's max_payload: fewer tasks than --limit")
			}
			if reply.Next != "" {
				fmt.Fprintf(e.out, "more follow: the same command with --after %s\n", reply.Next)
			}
			printUnreadable(e, reply.Unreadable)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&states, "state", nil, "states (repeat or comma separate, any case): PENDING, READY, RUNNING, RETRYING, PAUSED, SUCCEEDED, DEAD, CANCELLED")
	fs.StringVar(&req.Type, "type", "", "task type")
	fs.StringVar(&req.Tenant, "tenant", "", "tenant")
	fs.StringVar(&req.IDPrefix, "id-prefix", "", "only the tasks whose id starts with this")
	fs.IntVar(&req.Limit, "limit", admin.DefaultListLimit, fmt.Sprintf("tasks per page, at most %d", admin.MaxListLimit))
	fs.StringVar(&req.After, "after", "", "list the page after this cursor (the previous page's last line, or its JSON's next)")
	return cmd
}

// cutText cuts s to n runes on one line.
func cutText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func dlqCommand(e *env) *cobra.Command {
	dlq := &cobra.Command{Use: "dlq", Short: "List and replay dead letters"}
	var list admin.DLQListRequest
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbDLQList, func(ctx context.Context, api *admin.Client) (*admin.DLQListReply, error) {
				return api.ListDLQ(ctx, list)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tTASK\tTENANT\tTYPE\tATTEMPTS\tFAILED AT\tERROR")
			for _, l := range reply.Letters {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", l.Seq, l.TaskID, l.Tenant, l.Type, l.Attempts, l.FailedAt.Format(time.RFC3339), l.Error)
			}
			_ = tw.Flush()
			fmt.Fprintf(e.out, "%d of %d dead letters\n", len(reply.Letters), reply.Total)
			if reply.Truncated {
				fmt.Fprintf(e.out, "the reply was cut to fit the server's max_payload: fewer letters than --limit\n")
			}
			if reply.Next != 0 {
				fmt.Fprintf(e.out, "more follow: ax dlq ls --after %d\n", reply.Next)
			}
			return nil
		},
	}
	ls.Flags().StringVar(&list.Type, "type", "", "task type")
	ls.Flags().StringVar(&list.Tenant, "tenant", "", "tenant")
	ls.Flags().IntVar(&list.Limit, "limit", admin.DefaultDLQLimit, "letters to list")
	ls.Flags().Uint64Var(&list.After, "after", 0, "list the letters after this sequence (the next page, as the previous one says)")
	var replay admin.DLQReplayRequest
	rp := &cobra.Command{
		Use:   "replay [ID]",
		Short: "Put DEAD tasks back as READY: one by id (and --tenant), or those matching --type/--tenant up to --limit",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				replay.ID = args[0]
			}
			reply, err := callAdmin(cmd.Context(), e, admin.VerbDLQReplay, func(ctx context.Context, api *admin.Client) (*admin.DLQReplayReply, error) {
				return api.Replay(ctx, replay)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			verb := "replayed"
			if reply.DryRun {
				verb = "would replay (dry run)"
			}
			replayed := make([]string, len(reply.Replayed))
			for i, ref := range reply.Replayed {
				replayed[i] = ref.String()
			}
			fmt.Fprintf(e.out, "%s %d: %s\n", verb, reply.ReplayedCount, strings.Join(replayed, ", "))
			for id, why := range reply.Skipped {
				fmt.Fprintf(e.out, "  skipped %s: %s\n", id, why)
			}
			if reply.Truncated {
				fmt.Fprintf(e.out, "the reply was cut to fit the server's max_payload: %d replayed and %d skipped in all, listed in part\n", reply.ReplayedCount, reply.SkippedCount)
			}
			return nil
		},
	}
	rp.Flags().StringVar(&replay.Type, "type", "", "task type")
	rp.Flags().StringVar(&replay.Tenant, "tenant", "", "tenant")
	rp.Flags().IntVar(&replay.Limit, "limit", admin.DefaultDLQLimit, "most tasks to replay")
	rp.Flags().BoolVar(&replay.DryRun, "dry-run", false, "say what would be replayed, replay nothing")
	dlq.AddCommand(ls, rp)
	return dlq
}

func statsCommand(e *env) *cobra.Command {
	var req admin.StatsRequest
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Per bucket and per task type: depth, in flight, rates, p50/p99 run time and the timeout they recommend",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbStats, func(ctx context.Context, api *admin.Client) (*admin.StatsReply, error) {
				return api.Stats(ctx, req)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "BUCKET\tDEPTH\tCAPACITY\tIN FLIGHT\tSUBMIT/S\tDONE/S\tDEAD/S\tP50\tP99\tTIMEOUT")
			for _, b := range reply.Buckets {
				timeout := "-"
				if b.RecommendedTimeout > 0 {
					timeout = durationText(time.Duration(b.RecommendedTimeout))
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\n", priorityText(b.Priority), b.Depth, b.Capacity, b.InFlight,
					b.SubmittedRate, b.SucceededRate, b.DeadRate, durationText(time.Duration(b.P50)), durationText(time.Duration(b.P99)), timeout)
			}
			if len(reply.Types) > 0 {
				fmt.Fprintln(tw, "")
				fmt.Fprintln(tw, "TYPE\tDONE\tDEAD\tRETRIED\tTIMED OUT\tP50\tP99\tTIMEOUT SET\tTIMEOUT")
				for _, t := range reply.Types {
					set := "-" // no task of the type started
					if t.Timeout > 0 {
						set = durationText(time.Duration(t.Timeout))
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", t.Type, t.Succeeded, t.Dead, t.Retried, t.TimedOut,
						durationText(time.Duration(t.P50)), durationText(time.Duration(t.P99)), set, durationText(time.Duration(t.RecommendedTimeout)))
				}
			}
			if len(reply.Tenants) > 0 {
				fmt.Fprintln(tw, "")
				fmt.Fprintln(tw, "TENANT\tBUCKET\tWAITING\tIN FLIGHT")
				for _, q := range reply.Tenants {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", q.Tenant, priorityText(q.Priority), q.Waiting, q.InFlight)
				}
			}
			_ = tw.Flush()
			var states []string
			for s, n := range reply.States {
				states = append(states, fmt.Sprintf("%s %d", s, n))
			}
			slices.Sort(states)
			fmt.Fprintf(e.out, "window %s; %d records (%s); %d dead letters; TIMEOUT = 1.5 x p99\n", durationText(time.Duration(reply.Window)), reply.Records, strings.Join(states, ", "), reply.DLQ)
			printUnreadable(e, reply.Unreadable)
			printReconciler(e, reply.Reconciler)
			printRejects(e, reply.Rejects)
			printUnserved(e, reply.Unserved)
			if reply.Limits != nil {
				printLimits(e.out, reply.Limits, time.Now())
			}
			if reply.Truncated {
				fmt.Fprintf(e.out, "the reply was cut to fit the server's max_payload: %d task types (the fewest finished) and %d unserved types (the shallowest) left out\n",
					reply.TypesOmitted, reply.UnservedOmitted)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Window, "window", "", "window of finished tasks for rates and run times (default 5m)")
	return cmd
}

// printUnreadable names the task records a scan could not decode.
func printUnreadable(e *env, u *admin.Unreadable) {
	if u == nil {
		return
	}
	fmt.Fprintf(e.out, "%d task records could not be read (not counted, not acted on):\n", u.Count)
	ids := slices.Sorted(maps.Keys(u.Errors))
	for _, id := range ids {
		fmt.Fprintf(e.out, "  %s: %s\n", id, u.Errors[id])
	}
	if u.Omitted > 0 {
		fmt.Fprintf(e.out, "  (%d more not listed: the reply was cut to fit the server's max_payload)\n", u.Omitted)
	}
}

// printReconciler prints the leader reconciler's counts of lost tasks.
func printReconciler(e *env, r *control.ReconcilerReport) {
	if r == nil {
		fmt.Fprintln(e.out, "reconciler: no report yet (no leader has run it)")
		return
	}
	count := func(m map[kv.State]uint64) string {
		var parts []string
		for s, n := range m {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
		slices.Sort(parts)
		if len(parts) == 0 {
			return "0"
		}
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(e.out, "reconciler (leader %s, %s ago): lost tasks re-published %s; buried DEAD \"message lost\" %s; %d records tracked, %d checks, last pass %s\n",
		r.Leader, time.Since(r.UpdatedAt).Round(time.Second), count(r.Republished), count(r.Dead), r.Tracked, r.Checked, durationText(time.Duration(r.LastPass)))
	for _, rep := range r.Recent {
		fmt.Fprintf(e.out, "  %s %s %s (%s): %s\n", rep.At.Format(time.RFC3339), rep.TaskID, rep.Action, rep.State, rep.Reason)
	}
}

func workersCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "workers",
		Short: "List the live workers of the mesh: their shards and in-flight tasks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbWorkers, func(ctx context.Context, api *admin.Client) (*admin.WorkersReply, error) {
				return api.Workers(ctx)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			printMembers(e.out, reply.Workers, time.Now())
			if reply.Truncated {
				fmt.Fprintf(e.out, "the reply was cut to fit the server's max_payload: %d more workers not listed\n", reply.Omitted)
			}
			return nil
		},
	}
}

// printUnserved lists the task types no live worker serves (pools).
func printUnserved(e *env, unserved []kv.Unserved) {
	for _, u := range unserved {
		then := "no deadline: they wait"
		if u.Deadline > 0 {
			then = fmt.Sprintf("dead-lettered after %s unserved", time.Duration(u.Deadline))
		}
		fmt.Fprintf(e.out, "unserved type %s: %d tasks waiting, oldest since %s (no live worker serves it; %s)\n",
			u.Type, u.Depth, u.Oldest.Format(time.RFC3339), then)
	}
}
