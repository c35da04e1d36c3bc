package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
)

// smallService returns a Service on a server whose max_payload is 128 KiB,
// and a connection to request it with.
func smallService(t *testing.T) (*Service, *nats.Conn) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "server.conf")
	require.NoError(t, os.WriteFile(conf, []byte("max_payload: 131072\n"), 0o600))
	srv := natstest.Start(t, natstest.Options{ConfigFile: conf})
	nc, js := srv.Connect()
	natstest.Provision(t, js, nil)
	a, err := New(context.Background(), js, nil)
	require.NoError(t, err)
	return a, nc
}

// serve registers handle as the endpoint "test.<name>" of a micro service
// on a's connection, through a.endpoint as every verb is.
func serve(t *testing.T, a *Service, name string, handle func(context.Context, []byte) (any, error)) string {
	t.Helper()
	svc, err := micro.AddService(a.js.Conn(), micro.Config{Name: "test" + name, Version: "0.0.1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	subject := "test." + name
	require.NoError(t, svc.AddEndpoint(name, a.endpoint(name, handle), micro.WithEndpointSubject(subject)))
	require.NoError(t, a.js.Conn().Flush())
	return subject
}

// A reply too large to send is answered with code 413 and a message saying
// why, never with silence (before, the publish failed, was logged, and the
// caller waited for its timeout). An error message with line breaks, longer
// than a header should carry, comes as one line in the header and whole in
// the body.
func TestReplyFallbacks(t *testing.T) {
	t.Parallel()
	a, nc := smallService(t)
	big := serve(t, a, "big", func(context.Context, []byte) (any, error) {
		return map[string]string{"blob": strings.Repeat("x", 200<<10)}, nil
	})
	msg, err := nc.Request(big, nil, 10*time.Second)
	require.NoError(t, err, "a reply too large still answers")
	require.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, msg.Header.Get(micro.ErrorHeader), "more than the server's max_payload (131072)")

	long := "first line\nsecond line " + strings.Repeat("y", 200<<10)
	failing := serve(t, a, "failing", func(context.Context, []byte) (any, error) {
		return nil, &Error{Code: CodeConflict, Message: long}
	})
	msg, err = nc.Request(failing, nil, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "409", msg.Header.Get(micro.ErrorCodeHeader))
	line := msg.Header.Get(micro.ErrorHeader)
	require.True(t, strings.HasPrefix(line, "first line second line yyy"), line)
	require.LessOrEqual(t, len(line), maxErrorHeader)
	var body Error
	require.NoError(t, json.Unmarshal(msg.Data, &body))
	require.Equal(t, CodeConflict, body.Code)
	require.True(t, strings.HasPrefix(body.Message, "first line\nsecond line"))
	require.Contains(t, body.Message, "bytes in all]", "cut to fit, and says so")
	require.LessOrEqual(t, len(msg.Data), 131072)
}

// A trail too long for a reply keeps its first move and the newest that
// fit, and counts the others.
func TestTrailCutKeepsFirstAndNewest(t *testing.T) {
	t.Parallel()
	a, _ := smallService(t)
	var trail []kv.Move
	for i := range 200 {
		trail = append(trail, kv.Move{Task: "t", To: kv.StateReady, Action: fmt.Sprintf("move-%d", i), Error: strings.Repeat("e", 1<<10)})
	}
	reply := a.cutTrail(&TrailReply{ID: "t", Trail: trail})
	require.True(t, reply.Truncated)
	require.Equal(t, 200, len(reply.Trail)+reply.Omitted)
	require.Equal(t, "move-0", reply.Trail[0].Action)
	require.Equal(t, "move-199", reply.Trail[len(reply.Trail)-1].Action)
	require.Equal(t, fmt.Sprintf("move-%d", 200-len(reply.Trail)+1), reply.Trail[1].Action, "the newest, in order")
	data, err := json.Marshal(reply)
	require.NoError(t, err)
	require.LessOrEqual(t, len(data), a.replyBudget())

	short := a.cutTrail(&TrailReply{ID: "t", Trail: trail[:3]})
	require.False(t, short.Truncated)
	require.Len(t, short.Trail, 3)
}
