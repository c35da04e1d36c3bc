package integration

import (
	"fmt"
	"github.com/ax-mesh/ax/internal/axtest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `ax dev` runs a leader, and its ax_leader gauge says so (issue 17.6: it
// read 0).
func TestDevReportsItsLeader(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startDev(t, "--workers", "0", "--metrics-addr", addr)
	require.Eventually(t, func() bool {
		text, _ := axtest.Scraped("http://" + addr + "/metrics")
		return strings.Contains(text, "\nax_leader 1\n")
	}, 30*time.Second, 200*time.Millisecond)
}
