package axtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
)

// WaitTimeout is how long [WaitState] waits: room for a loaded 2-core
// machine running the race detector.
const WaitTimeout = 30 * time.Second

// ReadFunc reads the record of task id; [StoreRead] reads it from a record
// store, a test of permissions reads it through the management API as the
// operator.
type ReadFunc func(ctx context.Context, id string) (*kv.Record, error)

// StoreRead reads records from store with [Record].
func StoreRead(store *kv.Store) ReadFunc {
	return func(ctx context.Context, id string) (*kv.Record, error) { return Record(ctx, store, id) }
}

// Record reads the record of the one task of any tenant with id; for a
// task waiting in its bucket with its record still to be written at the
// claim, the READY record task.get shows ([kv.Store.Unclaimed]).
func Record(ctx context.Context, store *kv.Store, id string) (*kv.Record, error) {
	refs, _, err := store.Locate(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(refs) != 1 {
		return nil, fmt.Errorf("%d tasks have id %s: %w", len(refs), id, kv.ErrNotFound)
	}
	rec, _, _, err := store.Read(ctx, refs[0])
	return rec, err
}

// WaitState waits up to [WaitTimeout] until task id (of any tenant) is in
// one of states, and returns its record. On failure it prints the last
// record read, with its trail.
func (b *Bundle) WaitState(t testing.TB, id string, states ...kv.State) *kv.Record {
	t.Helper()
	return WaitState(t, StoreRead(b.Store), id, WaitTimeout, states...)
}

// WaitState waits up to within until task id, as read, is in one of
// states, and returns its record. On failure it prints the last record
// read, with its trail.
func WaitState(t testing.TB, read ReadFunc, id string, within time.Duration, states ...kv.State) *kv.Record {
	t.Helper()
	want := fmt.Sprint(states)
	if len(states) == 1 {
		want = string(states[0])
	}
	return WaitRecord(t, read, id, within, want, func(r *kv.Record) bool { return slices.Contains(states, r.State) })
}

// WaitRecord waits up to within until the record of task id, as read,
// satisfies cond (what the failure message calls want), and returns it.
// On failure it prints the last record read, its trail, and the last
// read's error.
func WaitRecord(t testing.TB, read ReadFunc, id string, within time.Duration, want string, cond func(*kv.Record) bool) *kv.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last *kv.Record
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec, err := read(ctx, id)
		cancel()
		if err == nil {
			last, lastErr = rec, nil
			if cond(rec) {
				return rec
			}
		} else {
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: not %s within %s\n%s", id, want, within, Describe(last, lastErr))
			return nil
		}
		<-tick.C
	}
}

// Describe is a record as a failure message shows it: state, attempt,
// last error and the trail, one move a line.
func Describe(rec *kv.Record, readErr error) string {
	var sb strings.Builder
	if rec == nil {
		sb.WriteString("no record read")
	} else {
		fmt.Fprintf(&sb, "last read: %s, attempt %d", rec.State, rec.Attempt)
		if rec.LastError != "" {
			fmt.Fprintf(&sb, ", last error %q", rec.LastError)
		}
		sb.WriteString("\ntrail:")
		for _, m := range rec.Trail {
			fmt.Fprintf(&sb, "\n  %s %s>%s", m.At.Format("15:04:05.000"), m.From, m.To)
			for _, f := range []struct{ name, value string }{{"action", m.Action}, {"worker", m.Worker}, {"error", m.Error}} {
				if f.value != "" {
					fmt.Fprintf(&sb, " %s=%q", f.name, f.value)
				}
			}
		}
		if len(rec.Trail) == 0 {
			sb.WriteString(" (empty)")
		}
	}
	if readErr != nil {
		fmt.Fprintf(&sb, "\nlast read error: %s", readErr.Error())
	}
	return sb.String()
}

// Moves is a record's trail as "FROM>TO" steps (">PENDING" for its birth).
func Moves(rec *kv.Record) []string {
	var out []string
	for _, m := range rec.Trail {
		out = append(out, fmt.Sprintf("%s>%s", m.From, m.To))
	}
	return out
}
