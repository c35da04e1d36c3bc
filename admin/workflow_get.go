package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkflowGetReply is a workflow's graph with each task's state
// (workflow.get).
type WorkflowGetReply struct {
	WorkflowSummary
	// OnFailure is the workflow's failure policy ("cancel", "continue").
	OnFailure string `json:"on_failure"`
	// Layers is the depth of the graph: a task's layer is one more than
	// its deepest parent's, the roots' 0.
	Layers int `json:"layers"`
	// Nodes are its tasks, by layer, then in the document's order.
	Nodes []WorkflowNode `json:"nodes"`
	// Truncated is true when Nodes lists fewer than Tasks, cut to fit the
	// server's max_payload (the first layers are kept).
	Truncated bool `json:"truncated,omitempty"`
}

// WorkflowNode is one task of a workflow and its edges.
type WorkflowNode struct {
	Name   string `json:"name"`
	TaskID string `json:"task_id"`
	Type   string `json:"type"`
	// State of its record; WAITING when it has none (not released yet).
	State string `json:"state"`
	// After are the tasks it starts after (its parents).
	After []string `json:"after,omitempty"`
	// WaitsFor are the parents that have not SUCCEEDED.
	WaitsFor  []string `json:"waits_for,omitempty"`
	Layer     int      `json:"layer"`
	LastError string   `json:"last_error,omitempty"`
}

// workflowDocument is the part of a workflow's document workflow.get shows.
type workflowDocument struct {
	ID        string `json:"id"`
	OnFailure string `json:"on_failure"`
	Batch     bool   `json:"batch"`
	Tasks     []struct {
		Name  string   `json:"name"`
		After []string `json:"after"`
		Task  struct {
			Type string `json:"type"`
		} `json:"task"`
	} `json:"tasks"`
}

// workflowGet reads a workflow's document and each task's record. Without
// a tenant it reads the one tenant's workflow of the id, and answers 409
// naming them when workflows of several tenants have it.
func (a *Service) workflowGet(ctx context.Context, data []byte) (any, error) {
	var req WorkflowRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.ID == "" {
		return nil, badRequest(`"id" is required`)
	}
	if err := streams.ValidateTaskID(req.ID); err != nil || strings.Contains(req.ID, "/") {
		return nil, badRequest("workflow id %q: not a workflow id", req.ID)
	}
	if req.Tenant != "" {
		if err := streams.ValidateToken("tenant", req.Tenant); err != nil {
			return nil, badRequest("%s", err)
		}
	}
	names := a.cfg.Names
	stream, err := a.js.Stream(ctx, names.WorkflowStream())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", names.WorkflowStream(), err)
	}
	tenant := req.Tenant
	if tenant == "" {
		if tenant, err = a.workflowTenant(ctx, stream, req.ID); err != nil {
			return nil, err
		}
	}
	msg, err := stream.GetLastMsgForSubject(ctx, names.WorkflowSubject(tenant, req.ID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, notFoundf("no workflow %s of tenant %s", req.ID, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow %s: %w", req.ID, err)
	}
	var doc workflowDocument
	if err := json.Unmarshal(msg.Data, &doc); err != nil {
		return nil, fmt.Errorf("workflow %s: its document does not decode: %w", req.ID, err)
	}
	reply := &WorkflowGetReply{WorkflowSummary: WorkflowSummary{ID: doc.ID, Tenant: tenant, SubmittedAt: msg.Time,
		Tasks: len(doc.Tasks), States: map[string]int{}}, OnFailure: doc.OnFailure, Nodes: []WorkflowNode{}}
	nodes := make([]WorkflowNode, len(doc.Tasks))
	index := make(map[string]int, len(doc.Tasks))
	for i, t := range doc.Tasks {
		index[t.Name] = i
		nodes[i] = WorkflowNode{Name: t.Name, TaskID: streams.WorkflowTaskID(doc.ID, t.Name, doc.Batch), Type: t.Task.Type,
			After: t.After, State: "WAITING"}
	}
	if err := a.readNodes(ctx, tenant, nodes); err != nil {
		return nil, fmt.Errorf("read workflow %s: %w", req.ID, err)
	}
	layer := layers(nodes, index)
	for i := range nodes {
		n := &nodes[i]
		n.Layer = layer[i]
		reply.Layers = max(reply.Layers, n.Layer+1)
		reply.States[n.State]++
		for _, p := range n.After {
			if j, ok := index[p]; !ok || nodes[j].State != string(kv.StateSucceeded) {
				n.WaitsFor = append(n.WaitsFor, p)
			}
		}
	}
	board, err := control.Open(ctx, a.js, names)
	if err != nil {
		return nil, err
	}
	switch _, err := board.Get(ctx, control.WorkflowPausedKey(tenant, doc.ID)); {
	case err == nil:
		reply.Paused = true
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, fmt.Errorf("read workflow %s: its pause mark: %w", req.ID, err)
	}
	reply.State = PausedState(WorkflowState(reply.States, reply.Tasks), reply.Paused)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Layer < nodes[j].Layer })
	kept, _ := fit(nodes, a.roomFor(reply))
	reply.Nodes, reply.Truncated = nodes[:kept], kept < len(nodes)
	return reply, nil
}

// workflowTenant returns the one tenant with a workflow of id.
func (a *Service) workflowTenant(ctx context.Context, stream jetstream.Stream, id string) (string, error) {
	filter := a.cfg.Names.WorkflowSubject("*", id)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return "", fmt.Errorf("find workflow %s: %w", id, err)
	}
	var tenants []string
	for subject := range info.State.Subjects {
		if tenant, _, ok := a.cfg.Names.ParseWorkflowSubject(subject); ok {
			tenants = append(tenants, tenant)
		}
	}
	slices.Sort(tenants)
	switch len(tenants) {
	case 0:
		return "", notFoundf("no workflow %s", id)
	case 1:
		return tenants[0], nil
	}
	return "", conflict("workflow id %s is ambiguous: workflows of %d tenants have it (%s); give its \"tenant\"", id, len(tenants), strings.Join(tenants, ", "))
}

// readNodes reads the record of each node's task, concurrently.
func (a *Service) readNodes(ctx context.Context, tenant string, nodes []WorkflowNode) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 32) // concurrent reads, batched by the store
	for i := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec, _, err := a.store.Get(ctx, kv.Ref{Tenant: tenant, ID: nodes[i].TaskID})
			switch {
			case errors.Is(err, kv.ErrNotFound):
			case err != nil:
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			default:
				nodes[i].State, nodes[i].LastError = string(rec.State), rec.LastError
			}
		})
	}
	wg.Wait()
	return first
}

// layers returns each node's layer: 0 for a root, else one more than its
// deepest parent's (a parent missing from the document counts as a root).
func layers(nodes []WorkflowNode, index map[string]int) []int {
	layer := make([]int, len(nodes))
	state := make([]byte, len(nodes)) // 0 unseen, 1 open, 2 done
	var visit func(i int) int
	visit = func(i int) int {
		if state[i] != 0 {
			return layer[i] // done, or a cycle (never stored) cut here
		}
		state[i] = 1
		for _, p := range nodes[i].After {
			if j, ok := index[p]; ok {
				layer[i] = max(layer[i], visit(j)+1)
			}
		}
		state[i] = 2
		return layer[i]
	}
	for i := range nodes {
		visit(i)
	}
	return layer
}
