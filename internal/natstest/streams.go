package natstest

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TB is what the stream helpers fail through: a test, or the collector of
// an EventuallyWithT condition (which runs off the test goroutine).
type TB interface {
	require.TestingT
	Helper()
}

// StreamMsgs returns the number of messages stored in the stream name.
func StreamMsgs(t TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// GetMsg returns the message at seq in the stream name.
func GetMsg(t TB, js jetstream.JetStream, stream string, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	require.NoError(t, err)
	msg, err := s.GetMsg(context.Background(), seq)
	require.NoError(t, err)
	return msg
}
