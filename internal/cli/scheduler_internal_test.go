package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ax-mesh/ax/internal/natstest"
)

// unansweredStream is a JetStream context on which binding one stream
// times out a number of times, as on a cluster electing that stream's
// leader (a node restarted), before it answers.
type unansweredStream struct {
	jetstream.JetStream
	stream string
	left   *atomic.Int32
}

func (u unansweredStream) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == u.stream && u.left.Add(-1) >= 0 {
		return nil, fmt.Errorf("stream info %s: %w", name, context.DeadlineExceeded)
	}
	return u.JetStream.Stream(ctx, name)
}

// syncBuffer is a bytes.Buffer safe for the command's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ax scheduler waits for its leader's start as for ax provision: on a
// provisioned deployment whose AX_P1 does not answer at first (what the
// leader reads and deploy.Open does not: the buckets' de-duplication
// windows against the record retention), it retries until it answers, then
// campaigns, instead of exiting. Red when dep.Leader is tried once: the
// command ends with "new leader: check record retention: bind AX_P1: ...
// context deadline exceeded". (On one server nothing else reaches this
// wait: ax provision writes the lock bucket, the end of the first wait,
// after every stream the leader reads.)
func TestSchedulerWaitsForItsLeaderToStart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, nil)

	var out, errOut syncBuffer
	root, e := newRoot(&out, &errOut)
	left := &atomic.Int32{}
	left.Store(3) // 250 ms, 500 ms and 1 s of waits
	e.wrapJS = func(js jetstream.JetStream) jetstream.JetStream {
		return unansweredStream{JetStream: js, stream: "AX_P1", left: left}
	}
	root.SetArgs([]string{"scheduler", "--server", srv.ClientURL(), "--scheduler-id", "s1", "--log-level", "warn"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = root.ExecuteContext(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	ended := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	require.Eventually(t, func() bool { return ended() || strings.Contains(errOut.String(), "scheduler s1 campaigning") },
		30*time.Second, 20*time.Millisecond, "ax scheduler did not campaign:\n%s", errOut.String())
	if ended() {
		require.Failf(t, "ax scheduler ended instead of waiting for its leader", "error: %v\n%s", runErr, errOut.String())
	}
	require.LessOrEqual(t, left.Load(), int32(0), "the leader started without meeting the three faults")
}
