package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/spf13/cobra"
)

func rejectsCommand(e *env) *cobra.Command {
	var req admin.RejectsSampleRequest
	cmd := &cobra.Command{
		Use:   "rejects",
		Short: "Sample the submit subjects for a while and list the messages no priority bucket stores",
		Long: `A message published under ax.submit.> or ax.core.> whose subject no priority
bucket captures (a wrong token count, a priority other than p0..p4) is not
stored, and a plain publish gets no answer. The leader always watches the
shapes it can watch without receiving valid submits (too few or too many
tokens, and the priority tokens P0..P4, p5..p9, 0..9, p): it logs
submit_rejected, counts ax_rejected_submits_total and reports them in
ax stats. Any other wrong priority token ("px", "high") has the shape of a
valid submit; only a sample sees it.

ax rejects subscribes to every submit subject for --for (default 5s, at
most 20s) and lists what no bucket captured, with the leader's watch report.
While it runs, every valid submit is delivered once more, to the sample.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbRejectsSample, func(ctx context.Context, api *admin.Client) (*admin.RejectsSampleReply, error) {
				return api.SampleRejects(ctx, req)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			fmt.Fprintf(e.out, "sampled %s on %s: %d messages, %d stored by a bucket, %d rejected%s\n",
				reply.For, strings.Join(reply.Subscribed, " "), reply.Seen, reply.Accepted, reply.Rejected, reasons(reply.ByReason))
			if reply.Dropped > 0 {
				fmt.Fprintf(e.out, "%d messages were dropped by the sample (too many to judge): counts are low\n", reply.Dropped)
			}
			if len(reply.Subjects) > 0 {
				tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "COUNT\tSUBJECT\tREASON\tWATCHED\tDETAIL")
				for _, r := range reply.Subjects {
					watched := "no (only a sample sees it)"
					if r.Watched {
						watched = "yes"
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Count, r.Subject, r.Reason, watched, r.Detail)
				}
				_ = tw.Flush()
			}
			if reply.Truncated {
				fmt.Fprintln(e.out, "the reply was cut to fit the server's max_payload: the rarest rejected subjects are left out")
			}
			printRejects(e, reply.Watch)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.For, "for", "", "how long to sample, 100ms to 20s (default 5s)")
	return cmd
}

// printRejects prints the leader watch's counts of mistyped submits.
func printRejects(e *env, r *control.RejectsReport) {
	if r == nil {
		fmt.Fprintln(e.out, "rejected submits: no report yet (no leader has run the watch)")
		return
	}
	fmt.Fprintf(e.out, "rejected submits (leader %s, %s ago): %d%s, not stored; `ax rejects` samples every shape\n",
		r.Leader, time.Since(r.UpdatedAt).Round(time.Second), r.Total, reasons(r.ByReason))
	if r.Dropped > 0 {
		fmt.Fprintf(e.out, "  %d more were dropped by the watch (too many to judge)\n", r.Dropped)
	}
	for _, x := range r.Recent {
		fmt.Fprintf(e.out, "  %s %s: %s\n", x.At.Format(time.RFC3339), x.Subject, x.Detail)
	}
}

// reasons formats counts by reason as " (priority 2, tokens 1)", or "".
func reasons(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}
