package admin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The deadline verb refuses what it cannot apply, with the reason, and
// changes one type without undoing another's.
func TestUnservedDeadlineVerb(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	for _, tc := range []struct {
		req  admin.UnservedDeadlineRequest
		want string
	}{
		{admin.UnservedDeadlineRequest{Type: "a.b", Deadline: kv.Duration(time.Hour)}, "type"},
		{admin.UnservedDeadlineRequest{Type: "report", Deadline: kv.Duration(time.Millisecond)}, "between 1s and"},
		{admin.UnservedDeadlineRequest{Type: "report", Deadline: kv.Duration(400 * 24 * time.Hour)}, "between 1s and"},
		{admin.UnservedDeadlineRequest{Deadline: kv.Duration(time.Hour)}, "needs the task type"},
	} {
		var reply control.UnservedDeadlines
		requireCode(t, b.call(t, admin.VerbUnservedDeadline, tc.req, &reply), admin.CodeBadRequest, tc.want)
	}
	table, err := b.api.UnservedDeadlines(ctx)
	require.NoError(t, err)
	require.Empty(t, table.Deadlines)
	_, err = b.api.SetUnservedDeadline(ctx, "report", time.Hour)
	require.NoError(t, err)
	_, err = b.api.SetUnservedDeadline(ctx, "resize", time.Minute)
	require.NoError(t, err)
	table, err = b.api.SetUnservedDeadline(ctx, "report", 0)
	require.NoError(t, err)
	require.Equal(t, map[string]kv.Duration{"resize": kv.Duration(time.Minute)}, table.Deadlines)
}

// Operators set the deadlines of many types at once: none is lost.
func TestUnservedDeadlineConcurrentOperators(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	want := map[string]kv.Duration{}
	for i := range 16 {
		typ := fmt.Sprintf("t%d", i)
		want[typ] = kv.Duration(time.Duration(i+1) * time.Minute)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.api.SetUnservedDeadline(ctx, typ, time.Duration(i+1)*time.Minute)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	table, err := b.api.UnservedDeadlines(ctx)
	require.NoError(t, err)
	require.Equal(t, want, table.Deadlines)
}

// A table of deadlines edited by hand into something ax cannot read is
// reported as such, and the next deadline an operator sets replaces it
// (it used to fail every read and every change, leaving only a manual
// delete of the key).
func TestUnservedDeadlinesReplaceAnUnreadableTable(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	board, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	_, err = board.PutString(ctx, control.UnservedDeadlinesKey, `{"deadlines":{"report":"soon"}}`)
	require.NoError(t, err)
	_, err = b.api.UnservedDeadlines(ctx)
	require.ErrorContains(t, err, "unserved deadlines are not readable")
	table, err := b.api.SetUnservedDeadline(ctx, "report", time.Hour)
	require.NoError(t, err)
	require.Equal(t, map[string]kv.Duration{"report": kv.Duration(time.Hour)}, table.Deadlines)
	table, err = b.api.UnservedDeadlines(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]kv.Duration{"report": kv.Duration(time.Hour)}, table.Deadlines)
}
