package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

// printMembers prints the members of the mesh, the shards each owns as
// ranges, and a summary line.
func printMembers(w io.Writer, members []kv.Member, now time.Time) {
	if len(members) == 0 {
		fmt.Fprintln(w, "no live workers")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tVERSION\tCONCURRENCY\tIN-FLIGHT\tSHARDS\tOWNED\tUP\tRENEWED")
	inFlight, shards := 0, 0
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s ago\n", m.ID, dash(m.Host), dash(m.Version), m.Concurrency,
			m.InFlight, len(m.Shards), dash(shardRanges(m.Shards)), now.Sub(m.StartedAt).Round(time.Second), now.Sub(m.RenewedAt).Round(100*time.Millisecond))
		inFlight += m.InFlight
		shards += len(m.Shards)
	}
	_ = tw.Flush()
	for _, m := range members {
		if len(m.Unhandled) > 0 {
			fmt.Fprintf(w, "%s has no handler for %s: it puts their tasks back for a worker that has one (it handles %s)\n",
				m.ID, strings.Join(m.Unhandled, ", "), dash(strings.Join(m.Handles, ", ")))
		}
	}
	if printPools(w, members) {
		fmt.Fprintf(w, "%d workers, %d tasks in flight\n", len(members), inFlight)
		return
	}
	fmt.Fprintf(w, "%d workers, %d tasks in flight, %d of %d shards owned\n", len(members), inFlight, shards, streams.Shards)
}

// printPools lists, on a pools deployment, each task type's workers and the
// shards each owns in the type's ring; it reports whether there were any.
func printPools(w io.Writer, members []kv.Member) bool {
	byType := map[string][]kv.Member{}
	for _, m := range members {
		for _, t := range m.Types {
			byType[t] = append(byType[t], m)
		}
	}
	if len(byType) == 0 {
		return false
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tWORKER\tPOOL\tSHARDS\tOWNED")
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		owned := 0
		for _, m := range byType[t] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", t, m.ID, strings.Join(m.Types, ","), len(m.Pools[t]), dash(shardRanges(m.Pools[t])))
			owned += len(m.Pools[t])
		}
		if owned < streams.Shards {
			fmt.Fprintf(tw, "%s\t(%d of %d shards owned)\t\t\t\n", t, owned, streams.Shards)
		}
	}
	_ = tw.Flush()
	return true
}

// shardRanges formats sorted shards compactly: "0-3,7,9-10".
func shardRanges(shards []int) string {
	var parts []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(shards[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", shards[i], shards[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
