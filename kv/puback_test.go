package kv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The hand-written reader of publish acknowledgements gives what
// encoding/json gives, and takes every form the server sends on the task
// path: a stored write, a repeated one, a write to a domain, and a lost
// compare-and-set (by way of encoding/json, as an API error).
func TestPubAckReaderMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  string
		fast bool // the hand-written reader takes it
		seq  uint64
		code jetstream.ErrorCode // the refusal's err_code, 0 for none
	}{
		{name: "stored", ack: `{"stream":"KV_AX_TASKS","seq":42}`, fast: true, seq: 42},
		{name: "domain", ack: `{"stream":"KV_AX_TASKS", "domain":"hub","seq":7}`, fast: true, seq: 7},
		{name: "duplicate", ack: `{"stream":"AX_P2","seq":9,"duplicate":true}`, fast: true, seq: 9},
		{name: "lost compare-and-set", ack: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_AX_TASKS","seq":0}`,
			code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "unknown field", ack: `{"stream":"KV_AX_TASKS","seq":3,"batch":"b","count":1}`, seq: 3},
		{name: "escaped stream name", ack: `{"stream":"KV_\u0041X","seq":4}`, seq: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, err := kv.ScanPubAck([]byte(tc.ack))
			if tc.fast {
				require.NoError(t, err)
				require.Equal(t, tc.seq, seq)
			} else {
				require.ErrorIs(t, err, kv.ErrSlow)
			}
			seq, err = kv.ParsePubAck([]byte(tc.ack))
			if tc.code != 0 {
				var apiErr *jetstream.APIError
				require.ErrorAs(t, err, &apiErr)
				require.Equal(t, tc.code, apiErr.ErrorCode)
				require.True(t, kv.IsRevisionMismatch(err))
				return
			}
			require.NoError(t, err)
			var want struct {
				Seq uint64 `json:"seq"`
			}
			require.NoError(t, json.Unmarshal([]byte(tc.ack), &want))
			require.Equal(t, want.Seq, seq)
		})
	}
	for _, bad := range []string{``, `{}`, `{"seq":1}`, `{"stream":"KV_AX_TASKS","seq":1} x`, `[1]`} {
		_, err := kv.ParsePubAck([]byte(bad))
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
	seq, err := kv.ScanPubAck(first.Data)
	require.NoError(t, err, string(first.Data))
	second := write(seq, "1h")
	next, err := kv.ScanPubAck(second.Data)
	require.NoError(t, err, string(second.Data))
	require.Greater(t, next, seq)
	lost := write(seq, "")
	_, err = kv.ParsePubAck(lost.Data)
	require.True(t, kv.IsRevisionMismatch(err), "%s: %v", lost.Data, err)
}
