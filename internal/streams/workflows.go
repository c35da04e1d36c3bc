package streams

import (
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTenant is the tenant of a task or workflow that names none.
const DefaultTenant = "default"

// WorkflowToken is the token in a workflow document's subject where a
// task's subject has its priority: "<prefix>.submit.wf.<tenant>.<id>.doc".
// Under the submit root, a producer allowed to submit its tenant's tasks
// ("<prefix>.submit.*.<tenant>.*.*") may submit its tenant's workflows,
// and no other tenant's.
const WorkflowToken = "wf"

// WorkflowTaskID returns the task id of the task name of workflow id:
// "<id>/<name>", or name in an atomic batch (whose tasks keep their ids).
func WorkflowTaskID(id, name string, batch bool) string {
	if batch {
		return name
	}
	return id + "/" + name
}

// WorkflowTasks is the part of a workflow's document that names its tasks,
// for the readers that need no more (the management API).
type WorkflowTasks struct {
	ID    string `json:"id"`
	Batch bool   `json:"batch,omitempty"`
	Tasks []struct {
		Name  string   `json:"name"`
		After []string `json:"after,omitempty"`
	} `json:"tasks"`
}

// ChildrenFirst returns the names of the tasks so that each comes before
// every task it waits for (its parents): the reverse of a dependency order.
func (w *WorkflowTasks) ChildrenFirst() []string {
	after := make(map[string][]string, len(w.Tasks))
	for _, t := range w.Tasks {
		after[t.Name] = t.After
	}
	seen := make(map[string]bool, len(w.Tasks))
	var order []string // parents before children
	var visit func(name string)
	visit = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		for _, p := range after[name] {
			visit(p)
		}
		order = append(order, name)
	}
	for _, t := range w.Tasks {
		visit(t.Name)
	}
	slices.Reverse(order)
	return order
}

// WorkflowStream returns the name of the workflows' stream, e.g.
// "AX_WORKFLOWS": one committed document per workflow.
func (n Names) WorkflowStream() string { return n.upperPrefix() + "_WORKFLOWS" }

// WorkflowSubject returns the subject of tenant's workflow id's document,
// "ax.submit.wf.<tenant>.<id>.doc".
func (n Names) WorkflowSubject(tenant, id string) string {
	return n.Prefix() + ".submit." + WorkflowToken + "." + tenant + "." + id + ".doc"
}

// WorkflowFilter returns the subjects of workflow documents,
// "ax.submit.wf.*.*.doc".
func (n Names) WorkflowFilter() string { return n.Prefix() + ".submit." + WorkflowToken + ".*.*.doc" }

// ParseWorkflowSubject returns the tenant and workflow id of a document's
// subject.
func (n Names) ParseWorkflowSubject(subject string) (tenant, id string, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.Prefix()+".submit."+WorkflowToken+".")
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, ".doc")
	if !ok {
		return "", "", false
	}
	tenant, id, ok = strings.Cut(rest, ".")
	if !ok || ValidateToken("tenant", tenant) != nil || ValidateTaskID(id) != nil || strings.Contains(id, "/") {
		return "", "", false
	}
	return tenant, id, true
}

// WorkflowStreamConfig returns the configuration of AX_WORKFLOWS: each
// workflow's document, kept WorkflowMaxAge (the leader releases a
// workflow's tasks from it, and `ax workflow get` draws it), and the parts
// of those larger than one message. Of what a producer's headers could
// make the server do, only atomic batches are allowed (a document in
// parts is one); no roll-up, TTL, schedule, counter or fast batch.
func WorkflowStreamConfig(cfg *Config) jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	n := cfg.Names
	return jetstream.StreamConfig{
		Name:        n.WorkflowStream(),
		Description: "ax workflows: one document per workflow (ax.submit.wf.<tenant>.<id>.doc, its parts on .part)",
		Subjects:    []string{n.WorkflowFilter(), n.WorkflowPartFilter()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxMsgs:     -1,
		MaxBytes:    cfg.WorkflowMaxBytes,
		MaxMsgSize:  cfg.withHeaderRoom(),
		MaxAge:      cfg.TrailMaxAge,
		Discard:     jetstream.DiscardNew,
		Duplicates:  DefaultDuplicates,
		AllowDirect: true,
		// A document larger than one message is one atomic batch: its
		// parts, then its commit (workflow_parts.go).
		AllowAtomicPublish: true,
	}
}
