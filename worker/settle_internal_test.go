package worker

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// An answer the connection could not send is logged once, by settle,
// whichever of the task path's answers it was; a delivery answers once.
func TestSettleLogsAFailedAnswer(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	d := &delivery{log: zap.New(core)}
	lost := errors.New("nats: connection closed")
	calls := 0
	err := d.settle(func() error { calls++; return lost })
	require.ErrorIs(t, err, lost)
	require.NoError(t, d.settle(func() error { calls++; return lost }), "a second answer is not sent")
	require.Equal(t, 1, calls)
	entries := logs.FilterMessage("settle_failed").All()
	require.Len(t, entries, 1)
	require.Equal(t, lost.Error(), entries[0].ContextMap()["error"])

	ok := &delivery{log: zap.New(core)}
	require.NoError(t, ok.settle(func() error { return nil }))
	require.Len(t, logs.FilterMessage("settle_failed").All(), 1, "a sent answer logs nothing")
}
