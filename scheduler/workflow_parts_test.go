package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// A workflow whose document is nearly MaxWorkflowBytes (16 MiB), 16 times
// the server's max_payload (1 MiB, the default), is stored in parts and
// committed by its document's message: each task runs once, after its
// parents, with its payload intact, and `ax workflow get` reads it. A
// second submit of its id is a duplicate, nothing stored. Red on the code
// before parts ("more than the 983040 one message holds").
func TestWorkflowInParts(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	require.EqualValues(t, 1<<20, b.NC.MaxPayload(), "the server's default max_payload")
	var (
		mu       sync.Mutex
		payloads = map[string][]byte{}
		runs     = map[string]int{}
		ended    = map[string]time.Time{}
		started  = map[string]time.Time{}
	)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("big", func(ctx context.Context, task *worker.Task) error {
		_, name := task.Workflow()
		mu.Lock()
		runs[name]++
		started[name] = time.Now()
		payloads[name] = bytes.Clone(task.Payload)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		ended[name] = time.Now()
		mu.Unlock()
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})

	wf := ax.NewWorkflow("huge")
	want := map[string][]byte{}
	const tasks, size = 20, 600 << 10 // 800 KiB each in base64: 16,000 KiB in all
	for i := range tasks {
		payload := make([]byte, size)
		for j := range payload {
			payload[j] = byte(rand.IntN(256))
		}
		name := fmt.Sprintf("t%02d", i)
		want[name] = payload
		var after []string // a binary tree: t00 the root
		if i > 0 {
			after = []string{fmt.Sprintf("t%02d", (i-1)/2)}
		}
		wf.Add(name, ax.TaskSpec{Type: "big", Payload: payload}, after...)
	}
	data, err := json.Marshal(wf)
	require.NoError(t, err)
	require.Greater(t, len(data), 15<<20, "a document of nearly 16 MiB")
	require.Less(t, len(data), ax.MaxWorkflowBytes)

	ctx := context.Background()
	small := ax.NewWorkflow("before").Add("one", ax.TaskSpec{Type: "big"})
	before, err := b.Client.SubmitWorkflow(ctx, small)
	require.NoError(t, err)
	began := time.Now()
	info, err := b.Client.SubmitWorkflow(ctx, wf)
	took := time.Since(began)
	require.NoError(t, err)
	require.False(t, info.Duplicate)
	stream, err := b.JS.Stream(ctx, "AX_WORKFLOWS")
	require.NoError(t, err)
	parts := 0
	for seq := before.Sequence + 1; seq < info.Sequence; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, "ax.submit.wf.default.huge.part", msg.Subject)
		require.LessOrEqual(t, len(msg.Data)+len(msg.Header), 1<<20)
		parts++
	}
	require.Equal(t, 17, parts, "16 MiB in parts of 960 KiB")

	for name := range want {
		b.WaitState(t, wf.TaskID(name), kv.StateSucceeded)
	}
	mu.Lock()
	for name, payload := range want {
		require.Equal(t, 1, runs[name], name)
		require.True(t, bytes.Equal(payload, payloads[name]), "%s ran with another payload", name)
		for _, task := range wf.Tasks {
			if task.Name == name {
				for _, p := range task.After {
					require.False(t, started[name].Before(ended[p]), "%s started before its parent %s ended", name, p)
				}
			}
		}
	}
	mu.Unlock()

	list, err := b.StartAdmin(t, nil).ListWorkflows(ctx, admin.WorkflowListRequest{})
	require.NoError(t, err)
	require.Len(t, list.Workflows, 2, "workflow.list: %+v", list.Workflows)
	require.Equal(t, []string{"huge", "before"}, []string{list.Workflows[0].ID, list.Workflows[1].ID})
	require.Equal(t, tasks, list.Workflows[0].Tasks)
	require.Equal(t, "SUCCEEDED", list.Workflows[0].State)
	t.Logf("a %d-byte document in %d parts (server max_payload %d): SubmitWorkflow took %s", len(data), parts, b.NC.MaxPayload(), took)

	again, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	require.True(t, again.Duplicate, "the same id again")
	info2, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, info.Sequence, info2.State.LastSeq, "a duplicate stored parts")
}

// A submitter that stops between the parts of a document (an atomic batch
// without its commit) leaves nothing stored and nothing runnable: the
// server drops the batch (after its 10 s timeout) and the same id can be
// submitted again. A document whose parts do not match its commit (a wrong
// digest, a missing part, a part out of order), published by hand, is no
// workflow: none of its tasks is released, and `ax workflow get` says why.
func TestWorkflowPartsCrashAndTamper(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	ctx := context.Background()
	stream, err := b.JS.Stream(ctx, "AX_WORKFLOWS")
	require.NoError(t, err)
	names := streams.DefaultNames()

	doc := func(id string) []byte {
		wf := ax.NewWorkflow(id)
		wf.Add("a", ax.TaskSpec{Type: "noop", Payload: bytes.Repeat([]byte("x"), 700<<10)})
		wf.Add("b", ax.TaskSpec{Type: "noop", Payload: bytes.Repeat([]byte("y"), 700<<10)}, "a")
		data, err := json.Marshal(wf)
		require.NoError(t, err)
		return data
	}
	part := func(id string, k int, data []byte) *nats.Msg {
		msg := nats.NewMsg(names.WorkflowPartSubject("default", id))
		msg.Data = data
		msg.Header.Set(streams.WorkflowPartHeader, strconv.Itoa(k))
		return msg
	}
	commit := func(id string, parts int, digest string) *nats.Msg {
		msg := nats.NewMsg(names.WorkflowSubject("default", id))
		msg.Header.Set(streams.WorkflowPartsHeader, strconv.Itoa(parts))
		msg.Header.Set(streams.WorkflowDigestHeader, digest)
		return msg
	}

	// The crash: two parts sent, no commit.
	crashed := streams.SplitWorkflowDocument(doc("crashed"), 900<<10)
	require.Len(t, crashed, 3)
	batch, err := jetstreamext.NewBatchPublisher(b.JS)
	require.NoError(t, err)
	require.NoError(t, batch.AddMsg(part("crashed", 1, crashed[0])))
	require.NoError(t, batch.AddMsg(part("crashed", 2, crashed[1])))
	require.NoError(t, b.NC.Flush())

	// Tampered documents, each published message by message.
	pieces := func(id string) [][]byte { return streams.SplitWorkflowDocument(doc(id), 900<<10) }
	publish := func(msgs ...*nats.Msg) {
		for _, m := range msgs {
			_, err := b.JS.PublishMsg(ctx, m)
			require.NoError(t, err)
		}
	}
	p := pieces("wrong-digest")
	publish(part("wrong-digest", 1, p[0]), part("wrong-digest", 2, p[1]), part("wrong-digest", 3, p[2]),
		commit("wrong-digest", 3, streams.WorkflowDigest([]byte("another document"))))
	p = pieces("missing")
	publish(part("missing", 1, p[0]), part("missing", 3, p[2]), commit("missing", 3, streams.WorkflowDigest(doc("missing"))))
	p = pieces("swapped")
	publish(part("swapped", 2, p[1]), part("swapped", 1, p[0]), part("swapped", 3, p[2]),
		commit("swapped", 3, streams.WorkflowDigest(doc("swapped"))))
	p = pieces("tampered")
	publish(part("tampered", 1, p[0]), part("tampered", 2, p[1]), part("tampered", 3, p[2]),
		commit("tampered", 3, streams.WorkflowDigest(doc("tampered")))) // the control: a valid document, by hand

	// Released without a record (no worker runs here): a message in its bucket.
	require.Eventually(t, func() bool { return axtest.BucketTaskIDs(t, ctx, b.JS)["tampered/a"] }, axtest.WaitTimeout, 20*time.Millisecond)
	waiting := axtest.BucketTaskIDs(t, ctx, b.JS)
	for _, id := range []string{"wrong-digest", "missing", "swapped", "crashed"} {
		_, _, err := b.Store.Get(ctx, kv.Ref{Tenant: "default", ID: id + "/a"})
		require.ErrorIs(t, err, kv.ErrNotFound, "%s/a was released", id)
		require.False(t, waiting[id+"/a"], "%s/a was released", id)
	}
	api := b.StartAdmin(t, nil)
	for _, c := range []struct{ id, want string }{
		{"wrong-digest", "digest"}, {"missing", "is not part 1"}, {"swapped", "is not part 1"},
	} {
		_, err := api.CancelWorkflow(ctx, admin.WorkflowRequest{Tenant: "default", ID: c.id})
		require.ErrorIs(t, err, &admin.Error{Code: admin.CodeNotFound}, c.id)
		require.ErrorContains(t, err, c.want, c.id)
	}

	_, err = stream.GetLastMsgForSubject(ctx, names.WorkflowPartSubject("default", "crashed"))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "a part of a batch without its commit was stored")
	time.Sleep(11 * time.Second) // past the server's batch timeout: the batch is dropped
	_, err = stream.GetLastMsgForSubject(ctx, names.WorkflowPartSubject("default", "crashed"))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
	_, _, err = b.Store.Get(ctx, kv.Ref{Tenant: "default", ID: "crashed/a"})
	require.ErrorIs(t, err, kv.ErrNotFound)
	require.False(t, axtest.BucketTaskIDs(t, ctx, b.JS)["crashed/a"])

	var wf ax.Workflow
	require.NoError(t, json.Unmarshal(doc("crashed"), &wf))
	info, err := b.Client.SubmitWorkflow(ctx, &wf)
	require.NoError(t, err)
	require.False(t, info.Duplicate, "the crashed submit took the id")
	require.Eventually(t, func() bool { return axtest.BucketTaskIDs(t, ctx, b.JS)["crashed/a"] }, axtest.WaitTimeout, 20*time.Millisecond)
}
