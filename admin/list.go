package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
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
	// After lists the records that come after it in the order: the Next of
	// the previous page. Empty: from the first. A record updated between
	// two pages moves in the order, so it may show in both or in neither.
	After string `json:"after,omitempty"`
}

// TasksListReply holds one page of the matching records without their
// trails (ask task.trail for one).
type TasksListReply struct {
	Tasks []kv.Record `json:"tasks"`
	// Matched counts every matching record, in all pages; Tasks holds at
	// most Limit.
	Matched int `json:"matched"`
	// Next is set when more matching records follow this page: ask again
	// with it as After. Empty: this page is the last.
	Next string `json:"next,omitempty"`
	// Truncated is true when the page holds fewer records than the limit
	// because the reply had to fit the server's max_payload.
	Truncated bool `json:"truncated,omitempty"`
	// Unreadable reports the records the scan could not decode (nil: none).
	Unreadable *Unreadable `json:"unreadable,omitempty"`
}

// ControlEntry is one key of the control bucket (AX_CONTROL): "pressure",
// "cron.<name>", "shards", "pools", "unserved-deadlines", "reconciler",
// "rejects", "limits" (docs/WIRE.md).
type ControlEntry struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// Value is the entry's JSON as stored (a JSON string when it is not JSON).
	Value json.RawMessage `json:"value"`
}

// ControlRequest asks for the control bucket's entries whose key sorts
// after After (the Next of the previous page; empty: from the first).
type ControlRequest struct {
	After string `json:"after,omitempty"`
}

// ControlReply lists the control bucket's entries, sorted by key, one page
// at a time.
type ControlReply struct {
	Entries []ControlEntry `json:"entries"`
	// Next is set when more entries follow this page, which was cut to fit
	// the server's max_payload (Truncated): ask again with it as After.
	Next      string `json:"next,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
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
	after, err := parseListCursor(req.After)
	if err != nil {
		return nil, err
	}
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
	if len(req.States) == 0 || slices.Contains(req.States, kv.StateReady) {
		// Tasks waiting in their buckets whose record the claim writes.
		waiting, err := a.unrecorded(ctx, req.Filter)
		if err != nil {
			return nil, err
		}
		for _, rec := range waiting {
			if strings.HasPrefix(rec.ID, req.IDPrefix) {
				matched = append(matched, *rec)
			}
		}
	}
	slices.SortFunc(matched, func(x, y kv.Record) int {
		return listOrder(listCursor{x.UpdatedAt, x.ID}, listCursor{y.UpdatedAt, y.ID})
	})
	reply := &TasksListReply{Matched: len(matched), Tasks: []kv.Record{}, Unreadable: unreadable}
	if unreadable != nil {
		dropped, _ := fitMap(unreadable.Errors, a.replyBudget()/4)
		unreadable.Omitted = dropped
	}
	if after != nil {
		from, _ := slices.BinarySearchFunc(matched, *after, func(r kv.Record, c listCursor) int {
			return listOrder(listCursor{r.UpdatedAt, r.ID}, c)
		})
		if from < len(matched) && matched[from].ID == after.id && matched[from].UpdatedAt.Equal(after.at) {
			from++
		}
		matched = matched[from:]
	}
	page := matched[:min(len(matched), limit)]
	n, _ := fit(page, a.roomFor(reply))
	reply.Tasks, reply.Truncated = page[:n], n < len(page)
	if n == 0 && len(page) > 0 {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("task %s does not fit in a reply (max_payload %d); read it with task.get", page[0].ID, a.js.Conn().MaxPayload())}
	}
	if n < len(matched) {
		last := reply.Tasks[n-1]
		reply.Next = listCursor{last.UpdatedAt, last.ID}.String()
	}
	return reply, nil
}

// listCursor is a place in the order of tasks.list: most recently updated
// first, then by id.
type listCursor struct {
	at time.Time
	id string
}

// String is the cursor as After takes it: "<updated_at in unix nanoseconds>/<id>".
func (c listCursor) String() string { return fmt.Sprintf("%d/%s", c.at.UnixNano(), c.id) }

// listOrder compares two places in the order of tasks.list.
func listOrder(x, y listCursor) int {
	return cmp.Or(y.at.Compare(x.at), strings.Compare(x.id, y.id))
}

// parseListCursor reads a request's After (nil when empty).
func parseListCursor(raw string) (*listCursor, error) {
	if raw == "" {
		return nil, nil
	}
	nanos, id, ok := strings.Cut(raw, "/")
	n, err := strconv.ParseInt(nanos, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, badRequest(`"after" %q is not a cursor of tasks.list: pass the "next" of the previous page`, raw)
	}
	return &listCursor{at: time.Unix(0, n), id: id}, nil
}

func (a *Service) control(ctx context.Context, data []byte) (any, error) {
	var req ControlRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	bucket, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	keys, err := kv.ListKeys(ctx, a.js, a.cfg.Names.ControlBucket(), "")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	slices.Sort(keys)
	reply := &ControlReply{Entries: []ControlEntry{}}
	room := a.roomFor(reply)
	for _, key := range keys {
		if key <= req.After {
			continue
		}
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
		e := ControlEntry{Key: key, Revision: entry.Revision(), Value: value}
		n, used := fit([]ControlEntry{e}, room)
		if n == 0 {
			if len(reply.Entries) == 0 {
				return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("control entry %s does not fit in a reply (max_payload %d); read it with the nats CLI (kv get %s %s)",
					key, a.js.Conn().MaxPayload(), a.cfg.Names.ControlBucket(), key)}
			}
			reply.Next, reply.Truncated = reply.Entries[len(reply.Entries)-1].Key, true
			break
		}
		room -= used
		reply.Entries = append(reply.Entries, e)
	}
	return reply, nil
}
