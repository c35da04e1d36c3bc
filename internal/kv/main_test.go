package kv_test

import (
	"testing"

	"github.com/ax-mesh/ax/internal/natstest"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakOptions()...)
}
