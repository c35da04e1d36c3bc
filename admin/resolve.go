package admin

import (
	"context"
	"strconv"
	"strings"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

// resolve returns the task a request names. A task id belongs to its
// tenant: with a tenant the request names that tenant's task; without one,
// the one task of any tenant that has a record of id. An id that names
// tasks of several tenants is refused (409, naming them) rather than
// guessed, and so is an unseen id without its tenant: its record would
// bind whichever tenant's message came first. waiting is the READY record
// the claim of the task starts from when resolve found it waiting in its
// bucket without a record ([kv.Store.Locate]), for [Service.materialize];
// nil when it has a record or resolve looked in no bucket (a tenant given).
func (a *Service) resolve(ctx context.Context, id, tenant string, unseen bool) (ref kv.Ref, waiting *kv.Record, err error) {
	if tenant != "" {
		if err := streams.ValidateToken("tenant", tenant); err != nil {
			return kv.Ref{}, nil, badRequest("%s", err.Error())
		}
		return kv.Ref{Tenant: tenant, ID: id}, nil, nil
	}
	// A task no worker has claimed yet may have no record: Locate finds
	// it in its bucket.
	refs, found, err := a.store.Locate(ctx, id)
	if err != nil {
		return kv.Ref{}, nil, err
	}
	switch len(refs) {
	case 1:
		if len(found) > 0 {
			waiting = found[0]
		}
		return refs[0], waiting, nil
	case 0:
		if unseen {
			return kv.Ref{}, nil, badRequest(`task %s has no record: to act on it before a worker sees it, give its "tenant" (ax … --tenant): a task id belongs to its tenant`, id)
		}
		return kv.Ref{}, nil, &Error{Code: CodeNotFound, Message: "get task " + id + ": " + kv.ErrNotFound.Error() +
			" (of any tenant): check the id; a task published but not yet taken by a worker has no record yet: cancel and pause take --unseen (unseen) and --tenant for it"}
	}
	tenants := make([]string, len(refs))
	for i, r := range refs {
		tenants[i] = r.Tenant
	}
	return kv.Ref{}, nil, &Error{Code: CodeConflict, Message: "task id " + id + " is ambiguous: tasks of " + strconv.Itoa(len(refs)) +
		" tenants have it (" + strings.Join(tenants, ", ") + `): give its "tenant" (ax … --tenant)`}
}
