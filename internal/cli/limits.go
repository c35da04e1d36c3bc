package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/spf13/cobra"
)

func addLimits(root *cobra.Command, e *env) {
	limit := &cobra.Command{Use: "limit", Short: "Mesh-wide concurrency and rate limits of a task type, a tenant or a key pattern; tenants' weights"}
	var concurrency, burst, weight int
	var rate float64
	set := &cobra.Command{
		Use:   "set TARGET (--concurrency N | --rate R [--burst B] | --weight W)",
		Short: "Set (replace) the limit of TARGET: a task type, tenant:NAME or key:PATTERN",
		Long: `Set the limit of TARGET, mesh-wide, at once on every worker. TARGET is a task type ("email"),
a tenant ("tenant:acme") or a pattern of partition keys ("key:order-*", '*' matching any run of
characters; every matching key shares the one limit).

--concurrency N: at most N of TARGET's tasks run at once across every worker. A slot is held
from before the claim until the task is settled, and renewed while it runs; a worker that dies
holding slots gives them back within its member TTL (10s by default).
--rate R [--burst B]: at most R of TARGET's tasks start per second, and at most R + B in any
second (B defaults to 1).
--weight W (a tenant or a type): the target's share of its priority's starts on each worker, where
the tenants take turns on a fair deployment (ax provision --fair) and the types a worker serves
on a pools deployment (ax provision --pools): in its turn it starts up to W of its tasks where
one without a weight starts one. A weight bounds nothing and holds no task back; elsewhere it
has no effect.

A task over a limit waits without using an attempt or a worker slot: parked on its worker until
a slot is given back (at most N per worker), or in its bucket, its message coming back after a
short delay (50ms doubling to 1s). A set replaces TARGET's limit: give both flags to have both.`,
		Example: `  ax limit set partner-api --concurrency 10
  ax limit set tenant:acme --rate 100 --burst 20
  ax limit set key:order-* --concurrency 1
  ax limit set tenant:acme --weight 3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l := kv.Limit{Concurrency: concurrency, Rate: rate, Burst: burst, Weight: weight}
			return runLimits(cmd.Context(), e, admin.VerbLimitSet, func(ctx context.Context, api *admin.Client) (*admin.LimitsReply, error) {
				return api.SetLimit(ctx, args[0], l)
			})
		},
	}
	set.Flags().IntVar(&concurrency, "concurrency", 0, "at most N of the target's tasks run at once, mesh-wide")
	set.Flags().Float64Var(&rate, "rate", 0, "at most R of the target's tasks start per second, mesh-wide")
	set.Flags().IntVar(&burst, "burst", 0, "starts allowed at once beyond the rate (default 1)")
	set.Flags().IntVar(&weight, "weight", 0, "a tenant's (fair deployment) or a type's (pools deployment) share of its priority's starts (default 1)")
	limit.AddCommand(set, &cobra.Command{
		Use:   "rm TARGET",
		Short: "Remove the limit of TARGET",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLimits(cmd.Context(), e, admin.VerbLimitRemove, func(ctx context.Context, api *admin.Client) (*admin.LimitsReply, error) {
				return api.RemoveLimit(ctx, args[0])
			})
		},
	}, &cobra.Command{
		Use:   "ls",
		Short: "List the limits with their use now, and the paused types and tenants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLimits(cmd.Context(), e, admin.VerbLimitList, func(ctx context.Context, api *admin.Client) (*admin.LimitsReply, error) {
				return api.Limits(ctx)
			})
		},
	})
	root.AddCommand(limit, pauseCommand(e, true), pauseCommand(e, false))
}

func pauseCommand(e *env, pause bool) *cobra.Command {
	var req admin.PauseRequest
	verb, use, short := admin.VerbPause, "pause TARGET", "Pause a task type or a tenant mesh-wide: its tasks wait in their buckets, unstarted"
	if !pause {
		verb, use, short = admin.VerbResume, "resume TARGET", "Resume a paused task type or tenant: its tasks start within 5s"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `. TARGET is a task type ("report") or a tenant ("tenant:acme"), as ax limit set
takes it.

A paused task is not claimed: it keeps its state (READY), uses no attempt and holds no worker
slot; its message comes back to a worker after a delay (0.5s doubling to 5s) and is naked again
while the pause lasts. To hold one task, use ax task pause ID.`,
		Example: `  ax pause report
  ax pause tenant:acme
  ax resume report`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if req.Type != "" || req.Tenant != "" {
					return fmt.Errorf("give TARGET or the deprecated --type/--tenant, not both")
				}
				target, err := pauseTarget(args[0])
				if err != nil {
					return err
				}
				req = target
			} else if req.Type == "" && req.Tenant == "" {
				return usageError{fmt.Errorf("%s needs a TARGET: a task type or tenant:NAME", cmd.CommandPath())}
			}
			return runLimits(cmd.Context(), e, verb, func(ctx context.Context, api *admin.Client) (*admin.LimitsReply, error) {
				if pause {
					return api.PauseTasksOf(ctx, req)
				}
				return api.ResumeTasksOf(ctx, req)
			})
		},
	}
	// The flags of ax before TARGET, kept for the scripts that use them.
	cmd.Flags().StringVar(&req.Type, "type", "", "the task type")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "the tenant")
	_ = cmd.Flags().MarkDeprecated("type", "give the type as TARGET: ax "+cmd.Name()+" TYPE")
	_ = cmd.Flags().MarkDeprecated("tenant", "give the tenant as TARGET: ax "+cmd.Name()+" tenant:NAME")
	return cmd
}

// pauseTarget reads the TARGET of ax pause and ax resume: a task type or
// tenant:NAME, the targets of ax limit set that a pause can have.
func pauseTarget(target string) (admin.PauseRequest, error) {
	if tenant, ok := strings.CutPrefix(target, "tenant:"); ok {
		return admin.PauseRequest{Tenant: tenant}, nil
	}
	if strings.HasPrefix(target, "key:") {
		return admin.PauseRequest{}, fmt.Errorf("TARGET %q: a pause has a task type or tenant:NAME as its target, not a key pattern", target)
	}
	return admin.PauseRequest{Type: target}, nil
}

func runLimits(ctx context.Context, e *env, verb string, fn func(context.Context, *admin.Client) (*admin.LimitsReply, error)) error {
	reply, err := callAdmin(ctx, e, verb, fn)
	if err != nil {
		return err
	}
	if e.jsonOut {
		return writeJSON(e.out, reply)
	}
	printLimits(e.out, reply, time.Now())
	return nil
}

// printLimits prints the limits with their use, and the pauses.
func printLimits(out io.Writer, reply *admin.LimitsReply, now time.Time) {
	if reply == nil || len(reply.Limits) == 0 && len(reply.Paused) == 0 {
		fmt.Fprintln(out, "no limits, nothing paused")
		return
	}
	if len(reply.Limits) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "LIMIT\tCONCURRENCY\tIN USE\tRATE/S\tBURST\tTOKENS\tWEIGHT\tWAITING")
		for _, l := range reply.Limits {
			conc, inUse, rate, burst, tokens, weight := "-", "-", "-", "-", "-", "-"
			if l.Concurrency > 0 {
				conc, inUse = strconv.Itoa(l.Concurrency), strconv.Itoa(l.InUse)
			}
			if l.Rate > 0 {
				rate, burst, tokens = strconv.FormatFloat(l.Rate, 'g', -1, 64), strconv.Itoa(max(l.Burst, 1)), fmt.Sprintf("%.1f", l.Tokens)
			}
			if l.Weight > 0 {
				weight = strconv.Itoa(l.Weight)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", l.Target, conc, inUse, rate, burst, tokens, weight, count(l.Waiting))
			if l.Error != "" {
				fmt.Fprintf(tw, "\t(use unknown: %s)", l.Error)
			}
			fmt.Fprintln(tw)
		}
		_ = tw.Flush()
	}
	for _, p := range reply.Paused {
		waiting := ""
		if p.Waiting != nil {
			waiting = fmt.Sprintf("; %d READY tasks held", *p.Waiting)
		}
		fmt.Fprintf(out, "paused %s since %s (%s ago%s)\n", p.Target, p.At.Format(time.RFC3339), now.Sub(p.At).Round(time.Second), waiting)
	}
}

// count prints a count that may be unknown ("-").
func count(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}
