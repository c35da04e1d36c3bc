package streams_test

import (
	"testing"

	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
)

// The filters of a bucket's stored tasks match what [streams.Names]
// formats and parses back.
func TestStoredFilters(t *testing.T) {
	t.Parallel()
	names, err := streams.NewNames("orders")
	require.NoError(t, err)
	require.Equal(t, "orders.p2.>", names.StoredFilter(2))
	require.Equal(t, "orders.p2.*.*.resize.>", names.StoredTypeFilter(2, "resize"))
	for _, subject := range []string{names.StoredSubject(2, 7, "acme", "resize", "k"), names.CopySubject(2, "acme", "resize", "k")} {
		stored, err := names.ParseStored(subject)
		require.NoError(t, err)
		require.Equal(t, "resize", stored.Type)
	}
}
