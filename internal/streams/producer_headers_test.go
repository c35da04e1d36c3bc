package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// The priority buckets, which producers publish to, refuse what a
// producer's headers could make the server do (docs/SECURITY.md, "What the
// server answers a producer"), and keep the server's shortest
// de-duplication window; provisioning turns a roll-up allowed by hand off
// again.
func TestBucketsRefuseWhatAProducerCouldAskFor(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	ctx := context.Background()
	_, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	for p := range streams.Priorities {
		s, err := js.Stream(ctx, streams.DefaultNames().PriorityStream(p))
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		require.False(t, cfg.AllowRollup || cfg.AllowMsgTTL || cfg.AllowMsgSchedules || cfg.AllowMsgCounter || cfg.AllowAtomicPublish || cfg.AllowBatchPublish,
			"%s: %+v", cfg.Name, cfg)
		require.Equal(t, streams.DefaultBucketDuplicates, cfg.Duplicates, cfg.Name)
	}
	s, err := js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.AllowRollup = true
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	report, err := streams.Provision(ctx, js, nil)
	require.NoError(t, err)
	require.Contains(t, report.Updated, "stream AX_P2 (AllowRollup)")
	s, err = js.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	require.False(t, s.CachedInfo().Config.AllowRollup)

	_, err = streams.Provision(ctx, js, &streams.Config{Duplicates: 10 * time.Millisecond})
	require.ErrorContains(t, err, "at least 100ms")
}
