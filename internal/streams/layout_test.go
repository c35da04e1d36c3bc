package streams_test

import (
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A layout's name reads back as the layout, the zero Layout is the shared
// one, and a bucket's layout is read from its routing metadata, whose
// values stay those of the wire contract ("types", "tenants").
func TestLayoutNames(t *testing.T) {
	t.Parallel()
	for _, l := range streams.Layouts() {
		back, err := streams.ParseLayout(l.String())
		require.NoError(t, err)
		require.Equal(t, l, back)
	}
	zero, err := streams.ParseLayout("")
	require.NoError(t, err)
	require.Equal(t, streams.LayoutShared, zero)
	require.Equal(t, "shared", streams.Layout("").String())
	_, err = streams.ParseLayout("Pools")
	require.ErrorContains(t, err, `layout "Pools" is not one of [shared pools fair]`)

	for routing, want := range map[string]streams.Layout{"": streams.LayoutShared, "types": streams.LayoutPools,
		"tenants": streams.LayoutFair, "other": streams.LayoutShared} {
		sc := jetstream.StreamConfig{Metadata: map[string]string{streams.MetaRouting: routing}}
		require.Equal(t, want, streams.LayoutOf(sc), routing)
	}
	require.False(t, streams.LayoutShared.Routed())
	require.True(t, streams.LayoutPools.Routed())
	require.True(t, streams.LayoutFair.Routed())
}
