package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/spf13/cobra"
)

func addPools(root *cobra.Command, e *env) {
	pools := &cobra.Command{Use: "pools", Short: "Worker pools: deadlines of task types no live worker serves (every layout)"}
	pools.AddCommand(&cobra.Command{
		Use:   "deadline [TYPE DURATION]",
		Short: "Show, set or remove (DURATION 0) how long a type's tasks may wait unserved",
		Long: `A task whose type no live worker serves waits in its bucket: on a pools deployment (ax dev
--pools, ax provision --pools) no worker of its pool, on the default layout no worker with a
handler for it (a worker without one puts the task back for another, as in a rolling deploy).
With a deadline, the leader dead-letters such tasks once no live worker has served the type for
DURATION and the task has waited DURATION: DEAD with the reason "unserved: …", in the
dead-letter stream, from which ax dlq replay brings them back. TYPE '*' sets the deadline of
every type without one of its own, types a producer made up included (on the default layout,
the types live workers put back lately). Without arguments, lists the deadlines. DURATION 0
removes the type's deadline.`,
		Example: `  ax pools deadline report 1h
  ax pools deadline '*' 24h
  ax pools deadline report 0
  ax pools deadline`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return fmt.Errorf("want no arguments (list) or TYPE DURATION, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var d time.Duration
			if len(args) == 2 {
				var err error
				if d, err = time.ParseDuration(args[1]); err != nil {
					return fmt.Errorf("DURATION %q: %w (e.g. 90s, 30m, 24h; 0 removes)", args[1], err)
				}
			}
			reply, err := callAdmin(cmd.Context(), e, admin.VerbUnservedDeadline, func(ctx context.Context, api *admin.Client) (*control.UnservedDeadlines, error) {
				if len(args) == 0 {
					return api.UnservedDeadlines(ctx)
				}
				return api.SetUnservedDeadline(ctx, args[0], d)
			})
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, reply)
			}
			printDeadlines(e.out, reply)
			if pools, err := e.usesPools(cmd.Context()); err == nil && !pools {
				fmt.Fprintln(e.out, "note: this deployment does not route by type (provisioned without --pools): a deadline applies to the tasks of a type no live worker has a handler for, and '*' to the types live workers put back for want of one")
			}
			return nil
		},
	})
	root.AddCommand(pools)
}

func printDeadlines(out io.Writer, table *control.UnservedDeadlines) {
	if len(table.Deadlines) == 0 {
		fmt.Fprintln(out, "no deadlines: tasks of an unserved type wait until a worker serves it")
		return
	}
	for _, t := range slices.Sorted(maps.Keys(table.Deadlines)) {
		name := t
		if t == control.AnyUnservedType {
			name = "* (every type without its own)"
		}
		fmt.Fprintf(out, "%s: dead-lettered after %s unserved\n", name, time.Duration(table.Deadlines[t]))
	}
}

// usesPools reports whether the deployment routes by task type (its P0
// bucket was provisioned with pools).
func (e *env) usesPools(ctx context.Context) (bool, error) {
	names, err := e.names()
	if err != nil {
		return false, err
	}
	nc, js, err := e.connect("ax pools", roleOperator)
	if err != nil {
		return false, err
	}
	defer nc.Close()
	stream, err := js.Stream(ctx, names.PriorityStream(0))
	if err != nil {
		return false, fmt.Errorf("read %s: %w", names.PriorityStream(0), err)
	}
	return streams.LayoutOf(stream.CachedInfo().Config) == streams.LayoutPools, nil
}
