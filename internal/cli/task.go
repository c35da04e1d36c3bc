package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/spf13/cobra"
)

func addTask(root *cobra.Command, e *env) {
	task := &cobra.Command{Use: "task", Short: "Inspect and act on one task"}
	task.AddCommand(&cobra.Command{
		Use:   "get ID",
		Short: "Show a task's record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := e.getRecord(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, rec)
			}
			printRecord(e.out, rec)
			return nil
		},
	}, &cobra.Command{
		Use:   "trail ID",
		Short: "Show every state change of a task",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := e.getRecord(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if e.jsonOut {
				return writeJSON(e.out, rec.Trail)
			}
			printTrail(e.out, rec.Trail)
			return nil
		},
	})
	root.AddCommand(task)
}

func (e *env) getRecord(ctx context.Context, id string) (*kv.Record, error) {
	nc, js, err := e.connect("ax task")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	names, err := e.names()
	if err != nil {
		return nil, err
	}
	store, err := kv.NewStore(ctx, js, &kv.StoreConfig{Names: names})
	if err != nil {
		return nil, err
	}
	rec, _, err := store.Get(ctx, id)
	return rec, err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printRecord(w io.Writer, r *kv.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("ID", r.ID)
	row("State", r.State)
	row("Type", r.Type)
	row("Tenant", r.Tenant)
	row("Key", r.Key)
	row("Priority", fmt.Sprintf("P%d", r.Priority))
	row("Attempt", fmt.Sprintf("%d of %d", r.Attempt, r.MaxAttempts))
	row("Timeout", r.Timeout)
	row("Generation", r.Gen)
	if r.Worker != "" {
		row("Worker", r.Worker)
	}
	row("Created", r.CreatedAt.Format(time.RFC3339Nano))
	row("Updated", r.UpdatedAt.Format(time.RFC3339Nano))
	if r.StartedAt != nil {
		row("Started", r.StartedAt.Format(time.RFC3339Nano))
	}
	if r.FinishedAt != nil {
		row("Finished", r.FinishedAt.Format(time.RFC3339Nano))
	}
	if r.LastError != "" {
		row("Last error", r.LastError)
	}
	if r.DLQSeq != 0 {
		row("Dead letter", fmt.Sprintf("AX_DLQ sequence %d", r.DLQSeq))
	}
	_ = tw.Flush()
}

func printTrail(w io.Writer, trail []kv.Move) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tFROM\tTO\tWORKER\tACTION\tTOOK\tERROR")
	for _, m := range trail {
		from := string(m.From)
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.At.Format("15:04:05.000000"), from, m.To, dash(m.Worker), dash(m.Action), m.Took, m.Error)
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
