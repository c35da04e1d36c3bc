package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// LimitRequest sets (limit.set) or removes (limit.rm) the limit of one
// target: a task type, "tenant:NAME" or "key:PATTERN" ('*' matches any run
// of characters). A set replaces the target's limit: give both the
// concurrency and the rate to have both. A tenant's or a type's limit may
// carry a weight, its share of its priority's starts where the tenants (a
// fair deployment) or the types (a pools deployment) take turns.
type LimitRequest struct {
	Target      string  `json:"target"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Weight      int     `json:"weight,omitempty"`
}

// PauseRequest names the task type or the tenant a pause or resume
// applies to (one of them).
type PauseRequest struct {
	Type   string `json:"type,omitempty"`
	Tenant string `json:"tenant,omitempty"`
}

// target returns the pause target of r.
func (r PauseRequest) target() (string, error) {
	switch {
	case (r.Type == "") == (r.Tenant == ""):
		return "", badRequest("name a task type or a tenant (one of them)")
	case r.Tenant != "":
		return kv.TenantTargetPrefix + r.Tenant, nil
	}
	return r.Type, nil
}

// LimitStatus is one limit and its use now.
type LimitStatus struct {
	Target string `json:"target"`
	control.Limit
	// InUse is how many of its concurrency slots are held now.
	InUse int `json:"in_use"`
	// Tokens is how many starts its rate has to give now.
	Tokens float64 `json:"tokens,omitempty"`
	// Waiting is how many READY tasks it applies to, and PENDING ones a
	// worker stepped aside for want of room to wait ([kv.Record.WaitsSteppedAside])
	// (stats only: it scans the records; a raw publish no worker has seen
	// has none).
	Waiting *int `json:"waiting,omitempty"`
	// Error says why its use could not be read.
	Error string `json:"error,omitempty"`
}

// PauseStatus is one paused type ("email") or tenant ("tenant:acme").
type PauseStatus struct {
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	// Waiting is how many READY tasks it holds (stats only, as for
	// [LimitStatus.Waiting]).
	Waiting *int `json:"waiting,omitempty"`
}

// LimitsReply lists the limits with their use, and the pauses
// (limit.ls, and the answer of every change).
type LimitsReply struct {
	Limits []LimitStatus `json:"limits"`
	Paused []PauseStatus `json:"paused"`
}

// changeLimits applies fn to the limits in AX_CONTROL by compare-and-set,
// so that two operators' changes never undo each other, and answers the
// limits after the change.
func (a *Service) changeLimits(ctx context.Context, fn func(l *kv.Limits) error) (*LimitsReply, error) {
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	for range maxMoveTries {
		limits, rev, err := kv.ReadLimits(ctx, board)
		if err != nil && rev == 0 {
			return nil, err
		}
		if err != nil {
			a.log.Warn("limits_replaced", zap.Error(err)) // written by hand: a change starts anew
			limits = kv.Limits{}
		}
		if limits.Limits == nil {
			limits.Limits = map[string]kv.Limit{}
		}
		if limits.Paused == nil {
			limits.Paused = map[string]kv.Pause{}
		}
		if err := fn(&limits); err != nil {
			return nil, err
		}
		value, err := json.Marshal(limits)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", control.LimitsKey, err)
		}
		if rev == 0 {
			_, err = board.Create(ctx, control.LimitsKey, value)
		} else {
			_, err = board.Update(ctx, control.LimitsKey, value, rev)
		}
		if kv.IsRevisionMismatch(err) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", control.LimitsKey, err)
		}
		return a.limitsReply(ctx, limits), nil
	}
	return nil, fmt.Errorf("write %s: %w", control.LimitsKey, kv.ErrConflict)
}

// limitSet serves [VerbLimitSet].
func (a *Service) limitSet(ctx context.Context, data []byte) (any, error) {
	var req LimitRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	kind, _, err := kv.ParseTarget(req.Target, false)
	if err != nil {
		return nil, badRequest("%s", err.Error())
	}
	limit := kv.Limit{Concurrency: req.Concurrency, Rate: req.Rate, Burst: req.Burst, Weight: req.Weight}
	if err := limit.ValidateFor(kind); err != nil {
		return nil, badRequest("limit of %s: %s", req.Target, err.Error())
	}
	reply, err := a.changeLimits(ctx, func(l *kv.Limits) error {
		l.Limits[req.Target] = limit
		return nil
	})
	if err == nil {
		a.log.Info("limit_set", zap.String("target", req.Target), zap.Int("concurrency", limit.Concurrency),
			zap.Float64("rate", limit.Rate), zap.Int("burst", limit.Burst), zap.Int("weight", limit.Weight))
	}
	return reply, err
}

// limitRemove serves [VerbLimitRemove].
func (a *Service) limitRemove(ctx context.Context, data []byte) (any, error) {
	var req LimitRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	reply, err := a.changeLimits(ctx, func(l *kv.Limits) error {
		if _, ok := l.Limits[req.Target]; !ok {
			return notFoundf("no limit on %q", req.Target)
		}
		delete(l.Limits, req.Target)
		return nil
	})
	if err == nil {
		a.log.Info("limit_removed", zap.String("target", req.Target))
	}
	return reply, err
}

// limitList serves [VerbLimitList].
func (a *Service) limitList(ctx context.Context, data []byte) (any, error) {
	if err := decode(data, &struct{}{}); err != nil {
		return nil, err
	}
	return a.readLimits(ctx)
}

// readLimits reads the limits and their use.
func (a *Service) readLimits(ctx context.Context) (*LimitsReply, error) {
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	limits, _, err := kv.ReadLimits(ctx, board)
	if err != nil {
		return nil, err
	}
	return a.limitsReply(ctx, limits), nil
}

// pause serves [VerbPause]; resume serves [VerbResume].
func (a *Service) pause(ctx context.Context, data []byte) (any, error) {
	return a.pauseOrResume(ctx, data, true)
}

func (a *Service) resume(ctx context.Context, data []byte) (any, error) {
	return a.pauseOrResume(ctx, data, false)
}

func (a *Service) pauseOrResume(ctx context.Context, data []byte, pause bool) (any, error) {
	var req PauseRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	target, err := req.target()
	if err != nil {
		return nil, err
	}
	if _, _, err := kv.ParseTarget(target, true); err != nil {
		return nil, badRequest("%s", err.Error())
	}
	reply, err := a.changeLimits(ctx, func(l *kv.Limits) error {
		if pause {
			if _, ok := l.Paused[target]; !ok {
				l.Paused[target] = kv.Pause{At: time.Now().UTC()}
			}
			return nil
		}
		if _, ok := l.Paused[target]; !ok {
			return notFoundf("%q is not paused", target)
		}
		delete(l.Paused, target)
		return nil
	})
	if err == nil {
		a.log.Info("flow_paused", zap.String("target", target), zap.Bool("paused", pause))
	}
	return reply, err
}

// limitsReply lists limits with their use, read from AX_LIMITS (a read
// that fails is reported in the limit's Error).
func (a *Service) limitsReply(ctx context.Context, limits kv.Limits) *LimitsReply {
	reply := &LimitsReply{Limits: []LimitStatus{}, Paused: []PauseStatus{}}
	var use *kv.LimitUse
	var useErr error
	if len(limits.Limits) > 0 {
		use, useErr = kv.NewLimitUse(ctx, a.js, a.cfg.Names)
	}
	for _, target := range limits.Targets() {
		st := LimitStatus{Target: target, Limit: limits.Limits[target]}
		var errs []error
		if useErr != nil {
			errs = append(errs, useErr)
		} else {
			if st.Concurrency > 0 {
				n, err := use.InUse(ctx, target)
				st.InUse, errs = n, append(errs, err)
			}
			if st.Rate > 0 {
				tokens, err := use.Tokens(ctx, target, st.Rate, st.Burst)
				st.Tokens, errs = tokens, append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			st.Error = err.Error()
		}
		reply.Limits = append(reply.Limits, st)
	}
	for target, p := range limits.Paused {
		reply.Paused = append(reply.Paused, PauseStatus{Target: target, At: p.At})
	}
	slices.SortFunc(reply.Paused, func(x, y PauseStatus) int { return strings.Compare(x.Target, y.Target) })
	return reply
}

// SetLimit sets the limit of target (limit.set): a task type,
// "tenant:NAME" or "key:PATTERN". It replaces the target's limit.
func (c *Client) SetLimit(ctx context.Context, target string, limit control.Limit) (*LimitsReply, error) {
	return call[LimitsReply](ctx, c, VerbLimitSet, LimitRequest{Target: target, Concurrency: limit.Concurrency, Rate: limit.Rate,
		Burst: limit.Burst, Weight: limit.Weight})
}

// RemoveLimit removes the limit of target (limit.rm).
func (c *Client) RemoveLimit(ctx context.Context, target string) (*LimitsReply, error) {
	return call[LimitsReply](ctx, c, VerbLimitRemove, LimitRequest{Target: target})
}

// Limits lists the limits with their use, and the pauses (limit.ls).
func (c *Client) Limits(ctx context.Context) (*LimitsReply, error) {
	return call[LimitsReply](ctx, c, VerbLimitList, struct{}{})
}

// PauseTasksOf pauses a task type or a tenant mesh-wide (pause): no
// worker starts its tasks, which wait in their buckets, until
// [Client.ResumeTasksOf]. ([Client.Pause] pauses one task.)
func (c *Client) PauseTasksOf(ctx context.Context, req PauseRequest) (*LimitsReply, error) {
	return call[LimitsReply](ctx, c, VerbPause, req)
}

// ResumeTasksOf resumes a paused task type or tenant (resume).
func (c *Client) ResumeTasksOf(ctx context.Context, req PauseRequest) (*LimitsReply, error) {
	return call[LimitsReply](ctx, c, VerbResume, req)
}

// waitingCounter returns a record visitor that counts, in reply, the READY
// tasks each limit and pause applies to, and those a worker stepped aside
// for a limit; nil when reply has neither.
func waitingCounter(reply *LimitsReply) func(*kv.Record) {
	if reply == nil || len(reply.Limits) == 0 && len(reply.Paused) == 0 {
		return nil
	}
	type matcher struct {
		kind, name string
		n          *int
	}
	var ms []matcher
	add := func(target string, pause bool) *int {
		n := new(int)
		if kind, name, err := kv.ParseTarget(target, pause); err == nil {
			ms = append(ms, matcher{kind: kind, name: name, n: n})
		}
		return n
	}
	for i := range reply.Limits {
		reply.Limits[i].Waiting = add(reply.Limits[i].Target, false)
	}
	for i := range reply.Paused {
		reply.Paused[i].Waiting = add(reply.Paused[i].Target, true)
	}
	return func(r *kv.Record) {
		if r.State != kv.StateReady && !r.WaitsSteppedAside() {
			return
		}
		for _, m := range ms {
			switch {
			case m.kind == "type" && r.Type == m.name,
				m.kind == "tenant" && r.Tenant == m.name,
				m.kind == "key" && kv.MatchKey(m.name, r.Key):
				*m.n++
			}
		}
	}
}
