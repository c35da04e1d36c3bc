package cli

import (
	"fmt"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/spf13/pflag"
)

// layoutFlags choose the layout of a deployment being provisioned:
// --layout names it (streams.ParseLayout), --pools and --fair are short
// for --layout pools and --layout fair.
type layoutFlags struct {
	fs    *pflag.FlagSet
	name  string
	pools bool
	fair  bool
}

// add defines the flags on fs; poolsUsage and fairUsage describe the two
// routed layouts as the command uses them.
func (f *layoutFlags) add(fs *pflag.FlagSet, poolsUsage, fairUsage string) {
	f.fs = fs
	fs.StringVar(&f.name, "layout", string(streams.LayoutShared),
		"how the priority buckets hand tasks to workers: shared (a catch-all consumer per shard), pools or fair; only on a new deployment")
	fs.BoolVar(&f.pools, "pools", false, poolsUsage+" (--layout pools)")
	fs.BoolVar(&f.fair, "fair", false, fairUsage+" (--layout fair)")
}

// layout returns the layout the flags name, and an error naming the flags
// when they disagree.
func (f *layoutFlags) layout() (streams.Layout, error) {
	layout, err := streams.ParseLayout(f.name)
	if err != nil {
		return "", fmt.Errorf("--layout: %w", err)
	}
	var short streams.Layout
	var flag string
	switch {
	case f.pools && f.fair:
		return "", fmt.Errorf("--pools and --fair exclude each other (a bucket routes by task type or by tenant)")
	case f.pools:
		short, flag = streams.LayoutPools, "--pools"
	case f.fair:
		short, flag = streams.LayoutFair, "--fair"
	default:
		return layout, nil
	}
	if f.fs.Changed("layout") && layout != short {
		return "", fmt.Errorf("%s disagrees with --layout %s", flag, layout)
	}
	return short, nil
}
