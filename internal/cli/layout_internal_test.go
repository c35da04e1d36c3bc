package cli

import (
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// The layout flags: --layout names the layout, --pools and --fair are its
// short forms, and flags that disagree are an error that names them.
func TestLayoutFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want streams.Layout
		err  string
	}{
		{"none", nil, streams.LayoutShared, ""},
		{"layout shared", []string{"--layout", "shared"}, streams.LayoutShared, ""},
		{"layout pools", []string{"--layout", "pools"}, streams.LayoutPools, ""},
		{"layout fair", []string{"--layout=fair"}, streams.LayoutFair, ""},
		{"pools", []string{"--pools"}, streams.LayoutPools, ""},
		{"fair", []string{"--fair"}, streams.LayoutFair, ""},
		{"pools agrees", []string{"--pools", "--layout", "pools"}, streams.LayoutPools, ""},
		{"pools and fair", []string{"--pools", "--fair"}, "", "--pools and --fair exclude each other"},
		{"fair against layout", []string{"--fair", "--layout", "pools"}, "", "--fair disagrees with --layout pools"},
		{"pools against shared", []string{"--pools", "--layout", "shared"}, "", "--pools disagrees with --layout shared"},
		{"unknown", []string{"--layout", "typed"}, "", `--layout: layout "typed" is not one of [shared pools fair]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fs := pflag.NewFlagSet("provision", pflag.ContinueOnError)
			var f layoutFlags
			f.add(fs, "pools", "fair")
			require.NoError(t, fs.Parse(c.args))
			got, err := f.layout()
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}
