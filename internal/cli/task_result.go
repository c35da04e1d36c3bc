package cli

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// addTaskResult adds `ax task result` and `ax task watch` to task.
func addTaskResult(task *cobra.Command, e *env) {
	var resultTenant, watchTenant string
	task.AddCommand(tenantFlag(&cobra.Command{
		Use:   "result ID",
		Short: "Print a SUCCEEDED task's result (raw bytes); a task that ended otherwise fails with its state and last error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTaskGet, func(ctx context.Context, api *admin.Client) (*admin.TaskReply, error) {
				return api.Get(ctx, admin.TaskRequest{ID: args[0], Tenant: resultTenant})
			})
			if err != nil {
				return err
			}
			r := reply.Task
			switch r.State {
			case kv.StateSucceeded:
				if e.jsonOut {
					return writeJSON(e.out, struct {
						Result []byte `json:"result"`
					}{r.Result})
				}
				_, err := e.out.Write(r.Result)
				return err
			case kv.StateDead, kv.StateCancelled:
				return &ax.TaskEndedError{Tenant: r.Tenant, ID: r.ID, State: r.State, LastError: r.LastError}
			}
			return fmt.Errorf("task %s is %s: %w (ax task watch %s follows it)", r.Ref(), r.State, ax.ErrNotFinished, r.ID)
		},
	}, &resultTenant), tenantFlag(&cobra.Command{
		Use:   "watch ID",
		Short: "Print a task's state and progress as they change, until it ends (a watch of its record)",
		Long: `Print a task's state and progress as they change, until it ends. It watches the task's record
(an ordered consumer on KV_AX_TASKS filtered on its key), so the user needs, beside the management
API, to create that consumer (docs/ax-permissions.conf: the operator role has it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := callAdmin(cmd.Context(), e, admin.VerbTaskGet, func(ctx context.Context, api *admin.Client) (*admin.TaskReply, error) {
				return api.Get(ctx, admin.TaskRequest{ID: args[0], Tenant: watchTenant})
			})
			if err != nil {
				return err
			}
			return e.watchTask(cmd.Context(), reply.Task.Ref())
		},
	}, &watchTenant))
}

// watchTask prints every change of ref's state or progress until the task
// ends.
func (e *env) watchTask(ctx context.Context, ref kv.Ref) error {
	names, err := e.names()
	if err != nil {
		return err
	}
	nc, js, err := e.connect("ax task watch", roleOperator)
	if err != nil {
		return err
	}
	defer nc.Close()
	bucket, err := js.KeyValue(ctx, names.TasksBucket())
	if err != nil {
		return fmt.Errorf("watch task %s: %w", ref, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := bucket.Watch(ctx, ref.Key())
	if err != nil {
		return fmt.Errorf("watch task %s: %w", ref, err)
	}
	defer func() { _ = w.Stop() }()
	var last string
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch task %s: %w", ref, context.Cause(ctx))
		case entry, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch task %s: the watch ended", ref)
			}
			if entry == nil {
				continue
			}
			if entry.Operation() != jetstream.KeyValuePut {
				fmt.Fprintf(e.out, "%s  record deleted\n", time.Now().UTC().Format(time.RFC3339Nano))
				continue
			}
			var rec kv.Record
			if err := rec.UnmarshalJSON(entry.Value()); err != nil {
				return fmt.Errorf("watch task %s: revision %d does not decode: %w", ref, entry.Revision(), err)
			}
			if e.jsonOut {
				if err := writeJSON(e.out, &rec); err != nil {
					return err
				}
			} else if line := watchLine(&rec); line != last {
				fmt.Fprintf(e.out, "%s  %s\n", entry.Created().UTC().Format(time.RFC3339Nano), line)
				last = line
			}
			switch rec.State {
			case kv.StateSucceeded:
				return nil
			case kv.StateDead, kv.StateCancelled:
				return &ax.TaskEndedError{Tenant: rec.Tenant, ID: rec.ID, State: rec.State, LastError: rec.LastError}
			}
		}
	}
}

// watchLine is one line of `ax task watch`: the state, the attempt, the
// progress.
func watchLine(r *kv.Record) string {
	var b strings.Builder
	b.WriteString(string(r.State))
	if r.Attempt > 0 {
		fmt.Fprintf(&b, " attempt %d", r.Attempt)
		if r.MaxAttempts > 0 {
			fmt.Fprintf(&b, "/%d", r.MaxAttempts)
		}
	}
	if r.Progress != nil {
		fmt.Fprintf(&b, " %s", progressText(r.Progress))
	}
	if r.State == kv.StateSucceeded && len(r.Result) > 0 {
		fmt.Fprintf(&b, " result %d bytes", len(r.Result))
	}
	return b.String()
}

// progressText formats progress as "42% half way".
func progressText(p *kv.Progress) string {
	s := fmt.Sprintf("%.4g%%", p.Percent)
	if p.Note != "" {
		s += " " + p.Note
	}
	return s
}

// maxShownResult is how much of a result `ax task get` shows.
const maxShownResult = 256

// resultText shows a result for people: its text when printable UTF-8,
// cut to maxShownResult bytes, else its size.
func resultText(result []byte) string {
	if len(result) == 0 {
		return "(none)"
	}
	shown := result[:min(len(result), maxShownResult)]
	for i := 0; i < utf8.UTFMax-1 && len(shown) < len(result) && !utf8.Valid(shown); i++ {
		shown = shown[:len(shown)-1] // a rune cut at the bound
	}
	if !utf8.Valid(shown) || strings.ContainsFunc(string(shown), func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
		return fmt.Sprintf("%d bytes of binary (ax task result ID prints them)", len(result))
	}
	text := strings.ReplaceAll(string(shown), "\n", `\n`)
	if len(shown) < len(result) {
		text += fmt.Sprintf(" …[%d bytes in all: ax task result ID]", len(result))
	}
	return text
}
