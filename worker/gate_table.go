package worker

import "github.com/ax-mesh/ax/internal/kv"

// flowTable is a worker's compiled view of [kv.Limits].
type flowTable struct {
	pausedTypes   map[string]bool
	pausedTenants map[string]bool
	types         map[string]kv.Limit // by task type
	tenants       map[string]kv.Limit // by tenant
	keys          []keyLimit
	concurrency   map[string]int // by target: its concurrency limit, if any
	weights       groupWeights   // the tenants' and the types' shares of a turn
}

type keyLimit struct {
	pattern string
	limit   kv.Limit
}

// boundLimit is a limit that applies to a task, named by its target.
type boundLimit struct {
	target string
	limit  kv.Limit
}

// compileFlow compiles l; it returns the targets it ignores (not a task
// type, tenant:NAME or key:PATTERN, or a limit that is not valid), which
// only a value written by hand can hold.
func compileFlow(l kv.Limits) (*flowTable, []string) {
	if l.Empty() {
		return nil, nil
	}
	t := &flowTable{pausedTypes: map[string]bool{}, pausedTenants: map[string]bool{},
		types: map[string]kv.Limit{}, tenants: map[string]kv.Limit{}, concurrency: map[string]int{},
		weights: groupWeights{tenants: map[string]int{}, types: map[string]int{}}}
	var ignored []string
	for target := range l.Paused {
		kind, name, err := kv.ParseTarget(target, true)
		switch {
		case err != nil:
			ignored = append(ignored, "paused "+target)
		case kind == "tenant":
			t.pausedTenants[name] = true
		default:
			t.pausedTypes[name] = true
		}
	}
	for _, target := range l.Targets() {
		limit := l.Limits[target]
		kind, name, err := kv.ParseTarget(target, false)
		if err != nil || limit.ValidateFor(kind) != nil {
			ignored = append(ignored, target)
			continue
		}
		switch {
		case limit.Weight > 0 && kind == "tenant":
			t.weights.tenants[name] = limit.Weight
		case limit.Weight > 0:
			t.weights.types[name] = limit.Weight
		}
		if !limit.Bounds() {
			continue // a weight alone: no admission
		}
		if limit.Concurrency > 0 {
			t.concurrency[target] = limit.Concurrency
		}
		switch kind {
		case "tenant":
			t.tenants[name] = limit
		case "key":
			t.keys = append(t.keys, keyLimit{pattern: name, limit: limit})
		default:
			t.types[name] = limit
		}
	}
	return t, ignored
}

func (t *flowTable) paused(taskType, tenant string) bool {
	return t.pausedBy(taskType, tenant) != ""
}

// pausedBy names the pause that holds a task of taskType and tenant back,
// as `ax limit ls` names it (the type, or "tenant:" and the tenant), or "".
func (t *flowTable) pausedBy(taskType, tenant string) string {
	switch {
	case t.pausedTypes[taskType]:
		return taskType
	case t.pausedTenants[tenant]:
		return "tenant:" + tenant
	}
	return ""
}

// match returns the limits that apply to a task, in a fixed order.
func (t *flowTable) match(taskType, tenant, key string) []boundLimit {
	var out []boundLimit
	if l, ok := t.types[taskType]; ok {
		out = append(out, boundLimit{target: taskType, limit: l})
	}
	if l, ok := t.tenants[tenant]; ok {
		out = append(out, boundLimit{target: kv.TenantTargetPrefix + tenant, limit: l})
	}
	for _, k := range t.keys {
		if kv.MatchKey(k.pattern, key) {
			out = append(out, boundLimit{target: kv.KeyTargetPrefix + k.pattern, limit: k.limit})
		}
	}
	return out
}
