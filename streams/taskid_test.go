package streams_test

import (
	"testing"

	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A re-dispatched copy names its task in Ax-Task-Id; its Nats-Msg-Id
// ("<id>:g<gen>") is then only for de-duplication.
func TestTaskIDHeaderWinsOverMsgID(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	h.Set(streams.HeaderMsgID, "order-42:g3")
	h.Set(streams.HeaderTaskID, "order-42")
	h.Set(streams.HeaderGen, "3")
	o, err := streams.ParseHeaders(h)
	require.NoError(t, err)
	require.Equal(t, "order-42", o.ID)
	require.Equal(t, uint64(3), o.Gen)

	h.Set(streams.HeaderTaskID, "bad.id")
	_, err = streams.ParseHeaders(h)
	require.ErrorIs(t, err, streams.ErrBadHeader)
	require.ErrorContains(t, err, streams.HeaderTaskID)
}
