package dashboard

import (
	"context"
	"net/http"

	"github.com/ax-mesh/ax/admin"
)

// handleWorkflows lists the newest workflows: ?tenant= (empty: every
// tenant's), limit.
func (d *Dashboard) handleWorkflows(w http.ResponseWriter, r *http.Request) {
	n, err := limit(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	req := admin.WorkflowListRequest{Tenant: r.URL.Query().Get("tenant"), Limit: n}
	proxy(d, w, r, admin.VerbWorkflowList, func(ctx context.Context, api *admin.Client) (*admin.WorkflowListReply, error) {
		return api.ListWorkflows(ctx, req)
	})
}

// handleWorkflow reads one workflow's graph: /api/workflows/{id}?tenant=
// (without a tenant, the one tenant's workflow of id; the API answers 409
// when workflows of several tenants have it).
func (d *Dashboard) handleWorkflow(w http.ResponseWriter, r *http.Request) {
	req := admin.WorkflowRequest{ID: r.PathValue("id"), Tenant: r.URL.Query().Get("tenant")}
	proxy(d, w, r, admin.VerbWorkflowGet, func(ctx context.Context, api *admin.Client) (*admin.WorkflowGetReply, error) {
		return api.GetWorkflow(ctx, req)
	})
}
