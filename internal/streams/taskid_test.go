package streams_test

import (
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A control-plane copy names its task in Ax-Task-Id; its Nats-Msg-Id
// ("<id>:g<gen>:<nuid>") is then only for de-duplication.
func TestCopyHeadersNameTheTask(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	h.Set(streams.HeaderMsgID, "order-42:g3:abc")
	h.Set(streams.HeaderTaskID, "order-42")
	h.Set(streams.HeaderGen, "3")
	o, err := streams.ParseCopyHeaders(h)
	require.NoError(t, err)
	require.Equal(t, "order-42", o.ID)
	require.Equal(t, uint64(3), o.Gen)

	h.Set(streams.HeaderTaskID, "bad.id")
	_, err = streams.ParseCopyHeaders(h)
	require.ErrorIs(t, err, streams.ErrBadHeader)
	require.ErrorContains(t, err, streams.HeaderTaskID)
}

// A producer's message cannot steer ax through internal headers: Ax-Task-Id
// and Ax-Gen are ignored outside a control-plane copy (issue 13.1: at
// 54cd21a they named the task and its generation on any message).
func TestProducerCannotSetInternalHeaders(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	h.Set(streams.HeaderMsgID, "atk-1")
	h.Set(streams.HeaderTaskID, "victim")
	h.Set(streams.HeaderGen, "7")
	o, err := streams.ParseHeaders(h)
	require.NoError(t, err)
	require.Equal(t, "atk-1", o.ID)
	require.Zero(t, o.Gen)

	names := streams.DefaultNames()
	s, err := names.ParseStored("ax.p2.5.acme.email.k1")
	require.NoError(t, err)
	require.False(t, s.Copy)
	subject := names.CopySubject(2, "acme", "email", "k1")
	require.Equal(t, names.StoredSubject(2, streams.Shard("k1"), "acme", "email", "k1")+".ctl", subject)
	s, err = names.ParseStored(subject)
	require.NoError(t, err)
	require.True(t, s.Copy)
}
