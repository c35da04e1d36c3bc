package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"go.uber.org/zap"
)

// actionVerbs are the admin verbs POST /api/actions/{verb} may call.
var actionVerbs = []string{admin.VerbTaskCancel, admin.VerbTaskPause, admin.VerbTaskResume,
	admin.VerbTaskReprioritize, admin.VerbDLQReplay,
	admin.VerbLimitSet, admin.VerbLimitRemove, admin.VerbPause, admin.VerbResume}

// maxActionBody bounds an action request's body.
const maxActionBody = 64 << 10

// bounded returns ctx bounded by the configured call timeout.
func (d *Dashboard) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.cfg.CallTimeout)
}

// call makes one admin call through the typed client, bounded by the
// configured timeout.
func call[R any](ctx context.Context, d *Dashboard, do func(context.Context, *admin.Client) (*R, error)) (*R, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	return do(ctx, d.api)
}

// controlOf reads the control bucket's entries.
func controlOf(ctx context.Context, api *admin.Client) (*admin.ControlReply, error) {
	return api.Control(ctx)
}

// proxy answers the reply of one admin call of verb, or its error.
func proxy[R any](d *Dashboard, w http.ResponseWriter, r *http.Request, verb string, do func(context.Context, *admin.Client) (*R, error)) {
	resp, err := call(r.Context(), d, do)
	if err != nil {
		d.writeCallError(w, verb, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (d *Dashboard) handleWorkers(w http.ResponseWriter, r *http.Request) {
	proxy(d, w, r, admin.VerbWorkers, func(ctx context.Context, api *admin.Client) (*admin.WorkersReply, error) {
		return api.Workers(ctx)
	})
}

// handleLimits lists the mesh's limits with their use, and the pauses.
func (d *Dashboard) handleLimits(w http.ResponseWriter, r *http.Request) {
	proxy(d, w, r, admin.VerbLimitList, func(ctx context.Context, api *admin.Client) (*admin.LimitsReply, error) {
		return api.Limits(ctx)
	})
}

// limit reads the "limit" query parameter (0 when absent).
func limit(q url.Values) (int, error) {
	if q.Get("limit") == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(q.Get("limit"))
	if err != nil {
		return 0, fmt.Errorf("limit %q is not a number", q.Get("limit"))
	}
	return n, nil
}

// handleTasks searches tasks: ?id= (a prefix), type, tenant, state (comma
// separated), limit, after (the next page's cursor).
func (d *Dashboard) handleTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := limit(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	req := admin.TasksListRequest{IDPrefix: strings.TrimSpace(q.Get("id")), Limit: n, After: q.Get("after"),
		Filter: admin.Filter{Type: q.Get("type"), Tenant: q.Get("tenant")}}
	for s := range strings.SplitSeq(q.Get("state"), ",") {
		if s = strings.ToUpper(strings.TrimSpace(s)); s != "" {
			req.States = append(req.States, kv.State(s))
		}
	}
	proxy(d, w, r, admin.VerbTasksList, func(ctx context.Context, api *admin.Client) (*admin.TasksListReply, error) {
		return api.List(ctx, req)
	})
}

// TaskDetail is a task's record with its whole trail. The record's result
// is left out of Task and shown in Result, cut to [MaxShownResult]; its
// progress is Task's "progress".
type TaskDetail struct {
	Task     *kv.Record  `json:"task"`
	Revision uint64      `json:"revision"`
	Trail    []kv.Move   `json:"trail"`
	Result   *ResultView `json:"result,omitempty"`
}

// MaxShownResult is how many bytes of a task's result the task view
// carries.
const MaxShownResult = 4 << 10

// ResultView is a task's result as the task view shows it.
type ResultView struct {
	// Size of the whole result, in bytes.
	Size int `json:"size"`
	// Text is the result when it is UTF-8 text, cut to [MaxShownResult]
	// bytes; empty for a binary result.
	Text string `json:"text,omitempty"`
	// Binary is true when the result is not UTF-8 text (`ax task result`
	// prints it).
	Binary bool `json:"binary,omitempty"`
	// Truncated is true when Text is cut.
	Truncated bool `json:"truncated,omitempty"`
}

// resultView shows result, nil when empty.
func resultView(result []byte) *ResultView {
	if len(result) == 0 {
		return nil
	}
	v := &ResultView{Size: len(result)}
	shown := result[:min(len(result), MaxShownResult)]
	for i := 0; i < utf8.UTFMax-1 && len(shown) < len(result) && !utf8.Valid(shown); i++ {
		shown = shown[:len(shown)-1] // a rune cut at the bound
	}
	if !utf8.Valid(shown) {
		v.Binary = true
		return v
	}
	v.Text, v.Truncated = string(shown), len(shown) < len(result)
	return v
}

// handleTask reads one task: /api/tasks/{id}?tenant= (without a tenant,
// the one tenant's task with a record of id; the API answers 409 when
// tasks of several tenants have it).
func (d *Dashboard) handleTask(w http.ResponseWriter, r *http.Request) {
	req := admin.TaskRequest{ID: r.PathValue("id"), Tenant: r.URL.Query().Get("tenant")}
	got, err := call(r.Context(), d, func(ctx context.Context, api *admin.Client) (*admin.TaskReply, error) {
		return api.Get(ctx, req)
	})
	if err != nil {
		d.writeCallError(w, admin.VerbTaskGet, err)
		return
	}
	trail, err := call(r.Context(), d, func(ctx context.Context, api *admin.Client) (*admin.TrailReply, error) {
		return api.Trail(ctx, admin.TaskRequest{ID: got.Task.ID, Tenant: got.Task.Tenant})
	})
	if err != nil {
		d.writeCallError(w, admin.VerbTaskTrail, err)
		return
	}
	got.Task.Trail = nil
	result := resultView(got.Task.Result)
	got.Task.Result = nil
	writeJSON(w, http.StatusOK, &TaskDetail{Task: got.Task, Revision: got.Revision, Trail: trail.Trail, Result: result})
}

// handleDLQ lists dead letters: ?type, tenant, limit, after (the next
// page's first sequence less one).
func (d *Dashboard) handleDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := limit(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	req := admin.DLQListRequest{Filter: admin.Filter{Type: q.Get("type"), Tenant: q.Get("tenant")}, Limit: n}
	if raw := q.Get("after"); raw != "" {
		if req.After, err = strconv.ParseUint(raw, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("after %q is not a sequence", raw))
			return
		}
	}
	proxy(d, w, r, admin.VerbDLQList, func(ctx context.Context, api *admin.Client) (*admin.DLQListReply, error) {
		return api.ListDLQ(ctx, req)
	})
}

// handleAction runs one operator action: the body is the admin request of
// the verb, passed as is (the management API validates it).
func (d *Dashboard) handleAction(w http.ResponseWriter, r *http.Request) {
	verb := r.PathValue("verb")
	switch {
	case !slices.Contains(actionVerbs, verb):
		writeError(w, http.StatusNotFound, fmt.Errorf("unknown action %q (want one of %s)", verb, strings.Join(actionVerbs, ", ")))
		return
	case !d.cfg.AllowActions:
		writeError(w, http.StatusForbidden, ErrReadOnly)
		return
	case !sameOrigin(r):
		writeError(w, http.StatusForbidden, ErrCrossOrigin)
		return
	case !tokenOK(r, d.token):
		writeError(w, http.StatusForbidden, ErrBadToken)
		return
	case r.Header.Get(confirmHeader) != "yes":
		writeError(w, http.StatusBadRequest, ErrNotConfirmed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err != nil || len(body) > maxActionBody || !json.Valid(body) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("the body must be the JSON request of %s, at most %d bytes (docs/API.md)", verb, maxActionBody))
		return
	}
	d.log.Info("dashboard_action", zap.String("verb", verb), zap.ByteString("request", body), zap.String("remote", r.RemoteAddr))
	// The body passes as is: any verb of actionVerbs, untyped.
	proxy(d, w, r, verb, func(ctx context.Context, api *admin.Client) (*json.RawMessage, error) {
		var reply json.RawMessage
		return &reply, api.Call(ctx, verb, json.RawMessage(body), &reply)
	})
}

// sameOrigin reports whether a request comes from the dashboard's own page:
// no Origin header (not a browser's cross-site request), or one naming the
// host the request was sent to (http, or https behind a proxy).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}
