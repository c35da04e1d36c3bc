package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ax-mesh/ax/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults and bounds of tasks.list.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// TasksListRequest lists task records matching a filter (empty: all), most
// recently updated first.
type TasksListRequest struct {
	Filter
	// IDPrefix keeps the tasks whose id starts with it.
	IDPrefix string `json:"id_prefix,omitempty"`
	// Limit bounds the records returned: default 100, at most 1,000.
	Limit int `json:"limit,omitempty"`
}

// TasksListReply holds the matching records without their trails (ask
// task.trail for one).
type TasksListReply struct {
	Tasks []kv.Record `json:"tasks"`
	// Matched counts every matching record; Tasks holds at most Limit.
	Matched int `json:"matched"`
	// Unreadable reports the records the scan could not decode (nil: none).
	Unreadable *Unreadable `json:"unreadable,omitempty"`
}

// ControlEntry is one key of the control bucket (AX_CONTROL): "pressure",
// "cron.<name>", "paused.<type>".
type ControlEntry struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// Value is the entry's JSON as stored (a JSON string when it is not JSON).
	Value json.RawMessage `json:"value"`
}

// ControlReply lists the control bucket's entries, sorted by key.
type ControlReply struct {
	Entries []ControlEntry `json:"entries"`
}

func (a *Service) tasksList(ctx context.Context, data []byte) (any, error) {
	var req TasksListRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := req.Filter.validate(); err != nil {
		return nil, err
	}
	if req.Limit < 0 || req.Limit > MaxListLimit {
		return nil, badRequest(`"limit" %d is outside 1..%d`, req.Limit, MaxListLimit)
	}
	limit := cmp.Or(req.Limit, DefaultListLimit)
	var matched []kv.Record
	unreadable, err := a.scan(ctx, func(rec *kv.Record) {
		if req.Filter.matches(rec) && strings.HasPrefix(rec.ID, req.IDPrefix) {
			rec.Trail = nil
			matched = append(matched, *rec)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(matched, func(x, y kv.Record) int {
		return cmp.Or(y.UpdatedAt.Compare(x.UpdatedAt), strings.Compare(x.ID, y.ID))
	})
	reply := &TasksListReply{Matched: len(matched), Tasks: matched[:min(len(matched), limit)], Unreadable: unreadable}
	if reply.Tasks == nil {
		reply.Tasks = []kv.Record{}
	}
	return reply, nil
}

func (a *Service) control(ctx context.Context, data []byte) (any, error) {
	if err := decode(data, &struct{}{}); err != nil {
		return nil, err
	}
	bucket, err := a.js.KeyValue(ctx, a.cfg.Names.ControlBucket())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	keys, err := kv.ListKeys(ctx, a.js, a.cfg.Names.ControlBucket(), "")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	reply := &ControlReply{Entries: []ControlEntry{}}
	for _, key := range keys {
		entry, err := bucket.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("read %s %s: %w", a.cfg.Names.ControlBucket(), key, err)
		}
		value := json.RawMessage(entry.Value())
		if !json.Valid(value) {
			value, _ = json.Marshal(string(entry.Value()))
		}
		reply.Entries = append(reply.Entries, ControlEntry{Key: key, Revision: entry.Revision(), Value: value})
	}
	slices.SortFunc(reply.Entries, func(x, y ControlEntry) int { return strings.Compare(x.Key, y.Key) })
	return reply, nil
}
