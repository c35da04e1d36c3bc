package kv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The hand-written reader of publish acknowledgements gives what
// encoding/json gives (stream, sequence, duplicate flag, domain), and
// takes every form the server sends on the task path: a stored write, a
// repeated one, a write to a domain, and a lost compare-and-set (by way of
// encoding/json, as an API error).
func TestPubAckReaderMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  string
		fast bool                // the hand-written reader takes it
		code jetstream.ErrorCode // the refusal's err_code, 0 for none
	}{
		{name: "stored", ack: `{"stream":"KV_AX_TASKS","seq":42}`, fast: true},
		{name: "domain", ack: `{"stream":"KV_AX_TASKS", "domain":"hub","seq":7}`, fast: true},
		{name: "duplicate", ack: `{"stream":"AX_P2","seq":9,"duplicate":true}`, fast: true},
		{name: "not a duplicate", ack: `{"stream":"AX_P2","seq":10,"duplicate":false}`, fast: true},
		{name: "duplicate first", ack: `{"duplicate":true,"seq":11,"stream":"AX_P3"}`, fast: true},
		{name: "lost compare-and-set", ack: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_AX_TASKS","seq":0}`,
			code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "unknown field", ack: `{"stream":"KV_AX_TASKS","seq":3,"batch":"b","count":1}`},
		{name: "escaped stream name", ack: `{"stream":"KV_\u0041X","seq":4,"duplicate":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want struct {
				jetstream.PubAck
			}
			require.NoError(t, json.Unmarshal([]byte(tc.ack), &want))
			fast, err := kv.ScanPubAck([]byte(tc.ack))
			if tc.fast {
				require.NoError(t, err)
				require.Equal(t, want.PubAck, fast)
			} else {
				require.ErrorIs(t, err, kv.ErrSlow)
			}
			ack, err := kv.ReadPubAck([]byte(tc.ack))
			seq, seqErr := kv.ParsePubAck([]byte(tc.ack))
			if tc.code != 0 {
				for _, err := range []error{err, seqErr} {
					var apiErr *jetstream.APIError
					require.ErrorAs(t, err, &apiErr)
					require.Equal(t, tc.code, apiErr.ErrorCode)
					require.True(t, kv.IsRevisionMismatch(err))
				}
				return
			}
			require.NoError(t, err)
			require.NoError(t, seqErr)
			require.Equal(t, want.PubAck, ack)
			require.Equal(t, want.Sequence, seq)
		})
	}
	for _, bad := range []string{``, `{}`, `{"seq":1}`, `{"stream":"KV_AX_TASKS","seq":1} x`, `[1]`, `{"stream":"AX_P2","seq":1,"duplicate":1}`} {
		_, err := kv.ParsePubAck([]byte(bad))
		require.Error(t, err, bad)
		_, err = kv.ReadPubAck([]byte(bad))
		require.Error(t, err, bad)
	}
}

// The server's acknowledgements of record writes take the hand-written
// path, and its refusal of a compare-and-set is a revision mismatch.
func TestServerPubAcksTakeTheFastPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	subject := kv.KeyPrefix("AX_TASKS") + "t.01JPUBACK"
	write := func(rev uint64, ttl string) *nats.Msg {
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{}`)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(rev))
		if ttl != "" {
			msg.Header.Set(jetstream.MsgTTLHeader, ttl)
		}
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		require.NoError(t, err)
		return reply
	}
	first := write(0, "")
	ack, err := kv.ScanPubAck(first.Data)
	require.NoError(t, err, string(first.Data))
	seq := ack.Sequence
	second := write(seq, "1h")
	next, err := kv.ScanPubAck(second.Data)
	require.NoError(t, err, string(second.Data))
	require.Greater(t, next.Sequence, seq)
	lost := write(seq, "")
	_, err = kv.ParsePubAck(lost.Data)
	require.True(t, kv.IsRevisionMismatch(err), "%s: %v", lost.Data, err)
}
