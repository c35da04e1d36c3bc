package dashboard_test

import (
	"testing"

	"github.com/ax-mesh/ax/dashboard"
	"github.com/stretchr/testify/require"
)

// A nil config is refused with the field it lacks, not a panic.
func TestNewNilConfig(t *testing.T) {
	t.Parallel()
	require.NotPanics(t, func() {
		_, err := dashboard.New(nil)
		require.ErrorContains(t, err, "Conn is required")
	})
}
