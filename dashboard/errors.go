package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/ax-mesh/ax/admin"
	"github.com/nats-io/nats.go"
)

// Errors of the dashboard's HTTP API, answered as JSON {"code","message"}.
var (
	// ErrReadOnly refuses an action when the dashboard runs without
	// --allow-actions.
	ErrReadOnly = errors.New("the dashboard is read-only: restart it with --allow-actions to cancel, pause, resume, reprioritize and replay tasks (the NATS permissions of its connection still apply)")
	// ErrNotConfirmed refuses an action request that lacks the confirmation
	// header the UI sends after the operator confirms.
	ErrNotConfirmed = errors.New("actions must be confirmed: send the header " + confirmHeader + ": yes (the UI asks the operator first)")
	// ErrCrossOrigin refuses an action posted from another site's page.
	ErrCrossOrigin = errors.New("cross-origin action refused")
	// ErrUnknownHost refuses a request whose Host header names no allowed
	// host (a DNS-rebound page), answered 421.
	ErrUnknownHost = errors.New("the dashboard does not serve this host name")
	// ErrBadToken refuses an action without the dashboard's action token.
	ErrBadToken = errors.New("actions need the dashboard's token: open the URL it printed at start (…/#token=…), or send the header " + tokenHeader)
)

// confirmHeader must accompany every action request.
const confirmHeader = "X-Ax-Confirm"

// apiError is the JSON body of an error answer.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeJSON answers v as JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, apiError{Code: code, Message: err.Error()})
}

// writeCallError maps an error of an admin call to an HTTP status: the
// management API's own codes (400, 404, 409, 500) pass through; a NATS
// permission violation is 403; no answer is 502 or 504.
func (d *Dashboard) writeCallError(w http.ResponseWriter, verb string, err error) {
	var ae *admin.Error
	switch {
	case errors.As(err, &ae):
		writeJSON(w, ae.Code, apiError{Code: ae.Code, Message: ae.Message})
	case errors.Is(err, nats.ErrPermissionViolation):
		writeError(w, http.StatusForbidden, err)
	case errors.Is(err, nats.ErrNoResponders):
		writeError(w, http.StatusBadGateway, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		if d.perms.isDenied(d.names.AdminSubject(verb)) {
			writeError(w, http.StatusForbidden, fmt.Errorf("the dashboard's NATS user may not publish to %s: grant it there (docs/SECURITY.md): %w",
				d.names.AdminSubject(verb), nats.ErrPermissionViolation))
			return
		}
		writeError(w, http.StatusGatewayTimeout, fmt.Errorf("the management API did not answer %s in time: %w", verb, err))
	default:
		writeError(w, http.StatusBadGateway, err)
	}
}
