package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// batchLimits is the server setting docs/SECURITY.md ("AX_WORKFLOWS")
// gives an operator to bound the batches producers may keep open on
// AX_WORKFLOWS: nats-server 2.15 has no bound per account or per user.
const batchLimits = `jetstream { limits { batch { max_msgs: 64, max_inflight_per_stream: 8 } } }`

// The open atomic batches on AX_WORKFLOWS are one pool for every tenant,
// under the shipped tenant accounts as in one account: one tenant's
// producer that opens max_inflight_per_stream batches (one part each,
// never committed, as a raw client may) holds them all, so another
// tenant's large workflow (a document in parts) is refused with the
// server's "too many inflight" and stores nothing, while its small one
// (one message, no batch) is stored. The server starts with the setting
// the docs give (nats-server's config keys, checked here: the ones the
// docs gave before, max_batch_inflight_per_stream and max_batch_size under
// limits, are unknown fields and the server refused to start).
func TestWorkflowBatchesSharedAsDocumented(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile(accountsFile)
	require.NoError(t, err)
	require.Contains(t, string(shipped), "\njetstream: enabled\n")
	conf := filepath.Join(t.TempDir(), "ax.conf")
	require.NoError(t, os.WriteFile(conf, []byte(strings.Replace(string(shipped), "\njetstream: enabled\n", "\n"+batchLimits+"\n", 1)), 0o600))
	srv := natstest.Start(t, natstest.Options{ConfigFile: conf})
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")

	// acme's producer opens 8 batches and commits none.
	acme, _ := srv.ConnectAs("producer-acme")
	open := func(i int) *nats.Msg {
		msg := nats.NewMsg(fmt.Sprintf("ax.submit.wf.acme.hold-%d.part", i))
		msg.Header.Set("Nats-Batch-Id", fmt.Sprintf("hold-%d", i))
		msg.Header.Set("Nats-Batch-Sequence", "1")
		msg.Data = []byte("{")
		return msg
	}
	for i := range 8 {
		require.NoError(t, acme.PublishMsg(open(i)))
	}
	require.NoError(t, acme.Flush())
	reply, err := acme.RequestMsg(open(8), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(reply.Data), "10210", "a ninth open batch: %s", reply.Data)

	// globex's large document is refused, stores nothing; its small one is stored.
	write := func(name string, payload int) string {
		t.Helper()
		tasks := make([]map[string]any, 4)
		for i := range tasks {
			tasks[i] = map[string]any{"name": fmt.Sprintf("t%d", i), "task": map[string]any{"type": "echo",
				"payload": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", payload)))}}
		}
		data, err := json.Marshal(map[string]any{"id": name, "tenant": "globex", "tasks": tasks})
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), name+".json")
		require.NoError(t, os.WriteFile(file, data, 0o600))
		return file
	}
	_, stderr, err := runAxAs(url, "producer-globex", time.Minute, "workflow", "submit", write("big", 300<<10))
	require.Error(t, err, "a document in parts was stored while another tenant held every open batch")
	require.Contains(t, stderr, "too many inflight", stderr)
	t.Logf("globex's large document: %s", strings.TrimSpace(stderr))
	require.Equal(t, "small: 4 tasks", strings.TrimSpace(mustAxAs(t, url, "producer-globex", "workflow", "submit", write("small", 10))))
	_, _, err = runAxAs(url, "operator", time.Minute, "workflow", "get", "big", "--tenant", "globex")
	require.Error(t, err, "the refused document was stored")
}
