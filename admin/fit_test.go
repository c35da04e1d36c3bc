package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// smallPayload is the max_payload of the server of the size tests: replies
// that grow with what producers submit outgrow it with a few hundred items
// (128 KiB: the smallest max_payload that leaves room for a task beside the
// 64 KiB a dead letter or a schedule adds).
const smallPayload = 128 << 10

// setupSmall is setupAdmin on a server whose max_payload is smallPayload.
func setupSmall(t *testing.T) *adminBundle {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "server.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "max_payload: %d\n", smallPayload), 0o600))
	b := setupAdminWith(t, axtest.Options{Server: natstest.Options{ConfigFile: conf}, Streams: &streams.Config{MaxMsgSize: -1}})
	require.EqualValues(t, smallPayload, b.NC.MaxPayload())
	return b
}

// raw sends req to verb and returns the reply message as it came.
func (b *adminBundle) raw(t *testing.T, verb string, req any) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	msg, err := b.NC.Request("ax.admin."+verb, data, 30*time.Second)
	require.NoError(t, err, "%s answers", verb)
	return msg
}

// dlq.list at its documented maximum (10,000) answers, below max_payload,
// even with large dead letters (4 KiB errors, 8 KiB payloads): each page is
// cut to fit, says so, and names where the next one starts; paging reads
// every letter once. Before, the reply exceeded max_payload and was never
// sent: the caller waited for its timeout.
func TestDLQListPagesBelowMaxPayload(t *testing.T) {
	t.Parallel()
	b := setupSmall(t)
	ctx := context.Background()
	const letters = 120
	for i := range letters {
		l := streams.Letter{TaskID: fmt.Sprintf("t%02d", i), Tenant: "acme", Type: "report", Error: strings.Repeat("e", 4<<10),
			Attempts: 3, FailedAt: time.Now(), Subject: "ax.submit.p2.acme.report.k"}
		_, err := streams.PublishDeadLetter(ctx, b.JS, streams.DefaultNames().DeadLetterMsg(l, make([]byte, 8<<10), nil, l.TaskID))
		require.NoError(t, err)
	}
	seen := map[string]bool{}
	after, pages := uint64(0), 0
	for {
		msg := b.raw(t, admin.VerbDLQList, admin.DLQListRequest{Limit: admin.MaxDLQLimit, After: after})
		require.Empty(t, msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"))
		require.LessOrEqual(t, len(msg.Data), smallPayload)
		var page admin.DLQListReply
		require.NoError(t, json.Unmarshal(msg.Data, &page))
		require.EqualValues(t, letters, page.Total)
		require.NotEmpty(t, page.Letters)
		for _, l := range page.Letters {
			require.False(t, seen[l.TaskID], "letter %s listed twice", l.TaskID)
			seen[l.TaskID] = true
			require.Equal(t, 8<<10, l.Size)
		}
		pages++
		if page.Next == 0 {
			require.False(t, page.Truncated)
			break
		}
		require.True(t, page.Truncated, "a page shorter than the limit says it was cut")
		after = page.Next
	}
	require.Len(t, seen, letters)
	require.Greater(t, pages, 3)

	// A limit reached before the room: the next page is named, not cut.
	var first admin.DLQListReply
	require.NoError(t, b.call(t, admin.VerbDLQList, admin.DLQListRequest{Limit: 2}, &first))
	require.Len(t, first.Letters, 2)
	require.False(t, first.Truncated)
	require.Equal(t, first.Letters[1].Seq, first.Next)
}

// stats with many task types answers below max_payload: the types with the
// most finished tasks are kept, the others counted in types_omitted.
// Before, the reply exceeded max_payload and never came.
func TestStatsCutBelowMaxPayload(t *testing.T) {
	t.Parallel()
	b := setupSmall(t)
	ctx := context.Background()
	store := b.Client.Store()
	now := time.Now().UTC()
	const types = 1200
	for i := range types {
		n := 1
		if i < 3 {
			n = 5 // the busiest types
		}
		for j := range n {
			rec := &kv.Record{ID: fmt.Sprintf("t%d-%d", i, j), Type: fmt.Sprintf("type-%04d", i), Tenant: "acme", Priority: 2,
				State: kv.StateDead, MaxAttempts: 1, Attempt: 1, CreatedAt: now, StartedAt: &now, FinishedAt: &now, LastError: "boom"}
			_, _, err := store.Create(ctx, rec, kv.Actor{Action: "test"})
			require.NoError(t, err)
		}
	}
	msg := b.raw(t, admin.VerbStats, admin.StatsRequest{})
	require.Empty(t, msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"))
	require.LessOrEqual(t, len(msg.Data), smallPayload)
	var stats admin.StatsReply
	require.NoError(t, json.Unmarshal(msg.Data, &stats))
	require.True(t, stats.Truncated)
	require.Equal(t, types, len(stats.Types)+stats.TypesOmitted)
	require.Greater(t, len(stats.Types), 100)
	kept := map[string]bool{}
	for i, ts := range stats.Types {
		kept[ts.Type] = true
		if i > 0 {
			require.Less(t, stats.Types[i-1].Type, ts.Type, "sorted by type")
		}
	}
	for i := range 3 {
		require.True(t, kept[fmt.Sprintf("type-%04d", i)], "the busiest types are kept")
	}
	require.Equal(t, types+3*4, stats.Records)
}

// tasks.list pages below max_payload: records with long errors, at the
// largest limit, come in pages cut to fit, each naming the next; paging
// reads each record once.
func TestTasksListPagesBelowMaxPayload(t *testing.T) {
	t.Parallel()
	b := setupSmall(t)
	ctx := context.Background()
	store := b.Client.Store()
	now := time.Now().UTC()
	const n = 300
	for i := range n {
		rec := &kv.Record{ID: fmt.Sprintf("task-%03d", i), Type: "report", Tenant: "acme", Priority: 2, State: kv.StateDead,
			CreatedAt: now, FinishedAt: &now, LastError: strings.Repeat("x", 1<<10)}
		_, _, err := store.Create(ctx, rec, kv.Actor{Action: "test"})
		require.NoError(t, err)
	}
	seen := map[string]bool{}
	after := ""
	for {
		msg := b.raw(t, admin.VerbTasksList, admin.TasksListRequest{Limit: admin.MaxListLimit, After: after})
		require.Empty(t, msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"))
		require.LessOrEqual(t, len(msg.Data), smallPayload)
		var page admin.TasksListReply
		require.NoError(t, json.Unmarshal(msg.Data, &page))
		require.Equal(t, n, page.Matched)
		for _, rec := range page.Tasks {
			require.False(t, seen[rec.ID], "task %s listed twice", rec.ID)
			seen[rec.ID] = true
		}
		if page.Next == "" {
			break
		}
		require.True(t, page.Truncated)
		after = page.Next
	}
	require.Len(t, seen, n)
	var reply map[string]any
	requireCode(t, b.call(t, admin.VerbTasksList, admin.TasksListRequest{After: "nonsense"}, &reply), admin.CodeBadRequest, `"after"`)
}

// control pages below max_payload; the Go client reads every page.
func TestControlPagesBelowMaxPayload(t *testing.T) {
	t.Parallel()
	b := setupSmall(t)
	ctx := context.Background()
	control, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	const n = 40
	for i := range n {
		_, err := control.Put(ctx, fmt.Sprintf("paused.type%02d", i), fmt.Appendf(nil, `{"note":%q}`, strings.Repeat("n", 4<<10)))
		require.NoError(t, err)
	}
	msg := b.raw(t, admin.VerbControl, admin.ControlRequest{})
	require.LessOrEqual(t, len(msg.Data), smallPayload)
	var first admin.ControlReply
	require.NoError(t, json.Unmarshal(msg.Data, &first))
	require.True(t, first.Truncated)
	require.NotEmpty(t, first.Next)
	all, err := b.api.Control(ctx)
	require.NoError(t, err)
	require.Len(t, all.Entries, n)
}
