package ax

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
)

// Limit bounds a target's tasks mesh-wide: how many run at once
// (Concurrency), how many start per second (Rate, Burst), and its share of
// the starts on a fair or pools deployment (Weight). Zero fields set
// nothing. See [Client.SetLimit].
type Limit = control.Limit

// LimitStatus is one limit with its use now: [Limit]'s fields, its target,
// the slots in use and the tokens its rate has left.
type LimitStatus = admin.LimitStatus

// PauseStatus is one paused task type or tenant, and since when.
type PauseStatus = admin.PauseStatus

// LimitsReport lists the limits with their use, and the pauses: what
// [Client.Limits] returns, and each change answers.
type LimitsReport = admin.LimitsReply

// TenantTarget returns the target of tenant's tasks for [Client.SetLimit],
// [Client.Pause] and the others: "tenant:<tenant>". A task type is its own
// target ("email").
func TenantTarget(tenant string) string { return control.TenantTargetPrefix + tenant }

// KeyTarget returns the target of the tasks whose partition key matches
// pattern ('*' matches any run of characters; every matching key shares
// the one limit) for [Client.SetLimit]: "key:<pattern>". A pause takes no
// key pattern.
func KeyTarget(pattern string) string { return control.KeyTargetPrefix + pattern }

// SetLimit sets the limit of target: a task type ("resize"), a tenant
// ([TenantTarget]) or a pattern of partition keys ([KeyTarget]), replacing
// the one it had. Every worker of the mesh applies it; tasks over it wait
// in their buckets (docs/API.md, "Limits and pauses"). It asks the
// management API (run by
// `ax scheduler` and `ax dev`), so the connection's user needs its
// permissions (the operator's in docs/ax-permissions.conf). A target that
// names nothing valid, or a limit with a negative field, is refused with
// an error and changes nothing.
func (c *Client) SetLimit(ctx context.Context, target string, limit Limit) (*LimitsReport, error) {
	if _, _, err := control.ParseTarget(target, false); err != nil {
		return nil, fmt.Errorf("set limit: %w", err)
	}
	report, err := c.admin().SetLimit(ctx, target, limit)
	if err != nil {
		return nil, fmt.Errorf("set limit of %s: %w", target, err)
	}
	return report, nil
}

// RemoveLimit removes the limit of target. A target without a limit is an
// error (an [*admin.Error] with code 404).
func (c *Client) RemoveLimit(ctx context.Context, target string) (*LimitsReport, error) {
	if _, _, err := control.ParseTarget(target, false); err != nil {
		return nil, fmt.Errorf("remove limit: %w", err)
	}
	report, err := c.admin().RemoveLimit(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("remove limit of %s: %w", target, err)
	}
	return report, nil
}

// Limits lists the limits with their use, and the pauses.
func (c *Client) Limits(ctx context.Context) (*LimitsReport, error) {
	report, err := c.admin().Limits(ctx)
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	return report, nil
}

// Pause pauses target, a task type ("email") or a tenant ([TenantTarget]),
// mesh-wide: no worker starts its tasks, which wait in their buckets,
// until [Client.Resume]. Tasks already running go on.
func (c *Client) Pause(ctx context.Context, target string) (*LimitsReport, error) {
	req, err := pauseRequest(target)
	if err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	report, err := c.admin().PauseTasksOf(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("pause %s: %w", target, err)
	}
	return report, nil
}

// Resume resumes a paused task type or tenant ([TenantTarget]).
func (c *Client) Resume(ctx context.Context, target string) (*LimitsReport, error) {
	req, err := pauseRequest(target)
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	report, err := c.admin().ResumeTasksOf(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", target, err)
	}
	return report, nil
}

// pauseRequest reads a pause target: a task type or "tenant:<name>".
func pauseRequest(target string) (admin.PauseRequest, error) {
	kind, name, err := control.ParseTarget(target, true)
	if err != nil {
		return admin.PauseRequest{}, err
	}
	if kind == "tenant" {
		return admin.PauseRequest{Tenant: name}, nil
	}
	return admin.PauseRequest{Type: name}, nil
}

// admin returns a client of the deployment's management API on c's
// connection.
func (c *Client) admin() *admin.Client { return admin.NewClient(c.js.Conn(), c.cfg.Names) }
