package admin_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
)

// requireErrorReply checks that msg is an error reply with code: the code
// and a one-line message in the micro headers, the same code and the
// message in its JSON body. It returns the body's message.
func requireErrorReply(t *testing.T, msg []byte, header map[string][]string, code int) string {
	t.Helper()
	get := func(name string) string {
		if v := header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	require.Equal(t, strconv.Itoa(code), get(micro.ErrorCodeHeader), "code header (message %q)", get(micro.ErrorHeader))
	line := get(micro.ErrorHeader)
	require.NotEmpty(t, line)
	require.NotContains(t, line, "\n")
	var body admin.Error
	require.NoError(t, json.Unmarshal(msg, &body), "the body is the error as JSON: %s", msg)
	require.Equal(t, code, body.Code)
	require.NotEmpty(t, body.Message)
	require.True(t, strings.HasPrefix(body.Message, strings.TrimSuffix(line[:min(len(line), 40)], "…")), "header %q, body %q", line, body.Message)
	return body.Message
}

// Every verb of the management API answers an error with its code and a
// message: in the micro error headers and as a JSON body. One error path of
// each verb; the list must name every verb.
func TestEveryVerbAnswersErrorsWithCode(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	done := b.Submit(t, ax.TaskSpec{Type: "email"})
	_, err := kvCancel(b, t, done)
	require.NoError(t, err)
	cases := []struct {
		verb     string
		req      any
		code     int
		contains string
	}{
		{admin.VerbTaskGet, admin.TaskRequest{ID: "nope"}, admin.CodeNotFound, "unknown task"},
		{admin.VerbTaskTrail, admin.TaskRequest{}, admin.CodeBadRequest, `"id" is required`},
		{admin.VerbTaskCancel, admin.TaskRequest{ID: "a.b"}, admin.CodeBadRequest, "task id"},
		{admin.VerbTaskPause, admin.TaskRequest{ID: "ghost"}, admin.CodeNotFound, "--unseen"},
		{admin.VerbTaskResume, admin.TaskRequest{ID: done}, admin.CodeConflict, "resume applies only to"},
		{admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: done, Priority: 7}, admin.CodeBadRequest, "not 0..4"},
		{admin.VerbTasksCancel, admin.BatchCancelRequest{}, admin.CodeBadRequest, "needs a filter"},
		{admin.VerbDLQList, admin.DLQListRequest{Limit: admin.MaxDLQLimit + 1}, admin.CodeBadRequest, `"limit"`},
		{admin.VerbDLQReplay, admin.DLQReplayRequest{}, admin.CodeBadRequest, "needs"},
		{admin.VerbStats, admin.StatsRequest{Window: "soon"}, admin.CodeBadRequest, "window"},
		{admin.VerbWorkers, map[string]any{"bogus": 1}, admin.CodeBadRequest, "not valid JSON"},
		{admin.VerbTasksList, admin.TasksListRequest{Limit: admin.MaxListLimit + 1}, admin.CodeBadRequest, `"limit"`},
		{admin.VerbControl, map[string]any{"bogus": 1}, admin.CodeBadRequest, "not valid JSON"},
		{admin.VerbRejectsSample, admin.RejectsSampleRequest{For: "1h"}, admin.CodeBadRequest, `"for"`},
		{admin.VerbUnservedDeadline, admin.UnservedDeadlineRequest{Deadline: 1}, admin.CodeBadRequest, "needs the task type"},
		{admin.VerbLimitSet, admin.LimitRequest{Target: "email"}, admin.CodeBadRequest, "needs a concurrency, a rate or a weight"},
		{admin.VerbLimitRemove, admin.LimitRequest{Target: "email"}, admin.CodeNotFound, "no limit on"},
		{admin.VerbLimitList, map[string]any{"bogus": 1}, admin.CodeBadRequest, "not valid JSON"},
		{admin.VerbPause, admin.PauseRequest{Type: "a", Tenant: "b"}, admin.CodeBadRequest, "one of them"},
		{admin.VerbResume, admin.PauseRequest{Type: "email"}, admin.CodeNotFound, "not paused"},
		{admin.VerbWorkflowCancel, admin.WorkflowRequest{ID: "ghost"}, admin.CodeNotFound, "no workflow ghost"},
		{admin.VerbWorkflowGet, admin.WorkflowRequest{ID: "ghost"}, admin.CodeNotFound, "no workflow ghost"},
		{admin.VerbWorkflowList, admin.WorkflowListRequest{Limit: admin.MaxWorkflowListLimit + 1}, admin.CodeBadRequest, `"limit"`},
		{admin.VerbWorkflowPause, admin.WorkflowRequest{ID: "ghost"}, admin.CodeNotFound, "no workflow ghost"},
		{admin.VerbWorkflowResume, admin.WorkflowRequest{}, admin.CodeBadRequest, `"id" is required`},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.verb, func(t *testing.T) {
			msg := b.raw(t, tc.verb, tc.req)
			require.Contains(t, requireErrorReply(t, msg.Data, msg.Header, tc.code), tc.contains)
			var resp map[string]any
			requireCode(t, b.call(t, tc.verb, tc.req, &resp), tc.code, tc.contains)
		})
		covered[tc.verb] = true
	}
	for _, verb := range admin.Verbs() {
		require.True(t, covered[verb], "no error case for %s", verb)
	}

	// A failure of JetStream itself is a 500 with what failed.
	require.NoError(t, b.JS.DeleteStream(context.Background(), "AX_DLQ"))
	msg := b.raw(t, admin.VerbDLQList, admin.DLQListRequest{})
	require.Contains(t, requireErrorReply(t, msg.Data, msg.Header, admin.CodeInternal), "dead-letter stream")
}

// The sample error reply of docs/API.md is the reply the service sends: its
// headers and body, to the byte.
func TestDocumentedErrorReply(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/API.md")
	require.NoError(t, err)
	_, sample, ok := strings.Cut(string(doc), "```\nNats-Service-Error-Code: ")
	require.True(t, ok, "docs/API.md has no sample error reply")
	sample, _, _ = strings.Cut("Nats-Service-Error-Code: "+sample, "\n```")
	lines := strings.Split(sample, "\n")
	require.Len(t, lines, 3, sample)

	b := setupAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, err := b.NC.RequestWithContext(ctx, "ax.admin."+admin.VerbTaskGet, []byte(`{"id":"nope","tenant":"acme"}`))
	require.NoError(t, err)
	require.Equal(t, lines[0], micro.ErrorCodeHeader+": "+msg.Header.Get(micro.ErrorCodeHeader))
	require.Equal(t, lines[1], micro.ErrorHeader+": "+msg.Header.Get(micro.ErrorHeader))
	require.Equal(t, lines[2], string(msg.Data))
}
