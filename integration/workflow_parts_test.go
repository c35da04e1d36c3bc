package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A workflow document of 16 MiB less a little, 16 times the shipped
// servers' max_payload (the default, 1 MiB), submitted by a tenant's
// producer with `ax workflow submit FILE` under both shipped permission
// files (through the tenant accounts' service imports too), is stored in
// parts and runs: every task SUCCEEDED, `ax workflow get` draws it. Red on
// the code before parts (the submit refused the document).
func TestWorkflowInPartsAsDeployed(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			srv := startRoleServer(t, file)
			url := srv.ClientURL()
			mustAxAs(t, url, "scheduler", "provision")
			startAxAs(t, url, "scheduler", "scheduler")
			w := startAxAs(t, url, "worker-1", "worker", "--log-level", "warn")
			require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
				30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())

			wf := &ax.Workflow{ID: "big", Tenant: "acme"}
			pad := bytes.Repeat([]byte("x"), 600<<10)
			wf.Add("root", ax.TaskSpec{Type: "echo"})
			for i := range 20 {
				wf.Add(fmt.Sprintf("t%d", i), ax.TaskSpec{Type: "echo", Payload: pad}, "root")
			}
			data, err := json.Marshal(wf)
			require.NoError(t, err)
			require.Greater(t, len(data), 16_000_000)
			doc := filepath.Join(t.TempDir(), "big.json")
			require.NoError(t, os.WriteFile(doc, data, 0o600))
			require.Equal(t, "big: 21 tasks", strings.TrimSpace(mustAxAs(t, url, "producer-acme", "workflow", "submit", doc)))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				out, stderr, err := runAxAs(url, "operator", time.Minute, "workflow", "get", "big", "--tenant", "acme")
				assert.NoError(c, err, stderr)
				assert.Contains(c, out, "21 tasks: 21 SUCCEEDED")
			}, 2*time.Minute, 500*time.Millisecond)
		})
	}
}

// The submitter, a tenant's producer process, SIGKILLed at random moments
// of a SubmitWorkflow and of an atomic batch (SubmitBatch with ax.Atomic),
// each stored in parts (about 5 MiB in 5 or 6 parts against the shipped
// max_payload of 1 MiB): 16 times each. After each kill the workflow is
// either all there (its document, each part, and the leader releases its
// root) or nothing at all (no document, no part, no task record), and an
// atomic batch has all 40 task records or none. No part is ever stored
// without its document (no orphan to clean). Red when the parts are
// published one by one instead of in one atomic batch (a part left stored
// without its document).
func TestWorkflowSubmitterKilled(t *testing.T) {
	t.Parallel()
	srv := startRoleServer(t, permissionsFile)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	startAxAs(t, url, "scheduler", "scheduler")
	bin := filepath.Join(t.TempDir(), "wfsubmit")
	build := exec.Command("nice", "-n", "19", "go", "build", "-o", bin, "./testdata/wfsubmit")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	submitter := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = roleEnv(url, "producer-acme")
		return cmd
	}

	// The whole submit, uninterrupted, sets the span of the kills.
	began := time.Now()
	out, err = submitter("workflow", "whole").CombinedOutput()
	require.NoError(t, err, "%s", out)
	span := time.Since(began)
	t.Logf("one submit of a workflow in parts, process start to end: %s", span)

	const rounds = 16
	type round struct {
		mode, id  string
		submitted bool
		midway    bool // killed after "submitting", before "submitted"
	}
	var done []round
	for i := range 2 * rounds {
		r := round{mode: "workflow", id: fmt.Sprintf("killed-%d", i)}
		if i%2 == 1 {
			r.mode = "batch"
		}
		cmd := submitter(r.mode, r.id)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(rand.Int64N(int64(span))))
		_ = cmd.Process.Kill() // SIGKILL
		_ = cmd.Wait()
		r.submitted = strings.Contains(stdout.String(), "submitted")
		r.midway = !r.submitted && strings.Contains(stdout.String(), "submitting")
		done = append(done, r)
	}

	nc, js := srv.ConnectAs("scheduler")
	defer nc.Close()
	ctx := context.Background()
	store, err := kv.NewStore(ctx, js, nil)
	require.NoError(t, err)
	stream, err := js.Stream(ctx, "AX_WORKFLOWS")
	require.NoError(t, err)
	names := streams.DefaultNames()
	// A task exists once it has a record or, released without one (the
	// claim writes it; no worker runs here), a message in its bucket.
	var waiting map[string]bool
	exists := func(id string) bool {
		_, _, err := store.Get(ctx, kv.Ref{Tenant: "acme", ID: id})
		if err != nil {
			require.ErrorIs(t, err, kv.ErrNotFound)
		}
		return err == nil || waiting[id]
	}
	stored := func(subject string) bool {
		_, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
		}
		return err == nil
	}
	time.Sleep(11 * time.Second) // past the server's batch timeout: a batch left open is dropped
	outcomes := map[string]int{}
	for _, r := range done {
		if r.midway {
			outcomes[r.mode+" killed in the submit"]++
		}
		switch r.mode {
		case "workflow":
			doc := stored(names.WorkflowSubject("acme", r.id))
			require.Equal(t, doc, stored(names.WorkflowPartSubject("acme", r.id)), "%s: its document and its parts", r.id)
			if r.submitted {
				require.True(t, doc, "%s: SubmitWorkflow returned nil, nothing stored", r.id)
			}
			if doc {
				require.Eventually(t, func() bool {
					waiting = axtest.BucketTaskIDs(t, ctx, js)
					return exists(r.id + "/s0")
				}, 30*time.Second, 100*time.Millisecond, "%s: its root was not released", r.id)
			} else {
				waiting = axtest.BucketTaskIDs(t, ctx, js)
				for i := range 6 {
					require.False(t, exists(fmt.Sprintf("%s/s%d", r.id, i)), "%s: a task without a document", r.id)
				}
			}
			outcomes[fmt.Sprintf("workflow stored %t", doc)]++
		case "batch":
			n := 0
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				n = 0
				waiting = axtest.BucketTaskIDs(c, ctx, js)
				for i := range 40 {
					if exists(fmt.Sprintf("%s-%d", r.id, i)) {
						n++
					}
				}
				assert.True(c, n == 0 && !r.submitted || n == 40, "%s: %d of 40 tasks (submitted %t)", r.id, n, r.submitted)
			}, 30*time.Second, 200*time.Millisecond)
			outcomes[fmt.Sprintf("batch stored %t", n == 40)]++
		}
	}
	// No part without its document, whoever published it.
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		if id, ok := strings.CutSuffix(strings.TrimPrefix(msg.Subject, "ax.submit.wf.acme."), ".part"); ok {
			_, err := stream.GetLastMsgForSubject(ctx, names.WorkflowSubject("acme", id))
			require.NoError(t, err, "part #%d of %s without its document", seq, id)
		}
	}
	require.GreaterOrEqual(t, outcomes["workflow killed in the submit"]+outcomes["batch killed in the submit"], 4,
		"too few kills in the submit itself: %v", outcomes)
	t.Logf("submitters SIGKILLed at random within %s: %v; %d messages in AX_WORKFLOWS", span, outcomes, info.State.Msgs)
}
