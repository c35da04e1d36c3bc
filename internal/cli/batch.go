package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ax-mesh/ax"
	"github.com/spf13/cobra"
)

// maxBatchErrors bounds the bad lines one error of ax submit --batch names.
const maxBatchErrors = 10

// batchLine is one task of a batch file and the line it is on.
type batchLine struct {
	line int
	spec ax.TaskSpec
}

// readBatch reads a batch file of `ax submit --batch`: JSON lines, one task
// a line in the task JSON shape (the "task" object of a workflow document:
// docs/API.md), blank lines skipped. Every bad line is named, up to
// [maxBatchErrors].
func readBatch(data []byte, file string) ([]batchLine, error) {
	var (
		tasks []batchLine
		bad   []string
	)
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	for n := 1; scanner.Scan(); n++ {
		text := bytes.TrimSpace(scanner.Bytes())
		if len(text) == 0 {
			continue
		}
		var spec ax.TaskSpec
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		err := dec.Decode(&spec)
		switch {
		case text[0] == '[':
			err = errors.New("a JSON array: --batch reads JSON lines, one task object a line")
		case text[0] != '{':
			err = errors.New("not a JSON object (one task a line)")
		case err == nil && dec.More():
			err = errors.New("more than one JSON value on the line")
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: %s", file, n, err))
			continue
		}
		tasks = append(tasks, batchLine{line: n, spec: spec})
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("--batch %s: %w", file, err)
	}
	if len(bad) == 0 && len(tasks) == 0 {
		return nil, fmt.Errorf("%w: --batch %s: no task in the file (JSON lines, one task a line)", ax.ErrInvalidTask, file)
	}
	return tasks, batchErrors(file, bad)
}

// checkBatch checks each task as the submit will, and that they are of one
// tenant with no id twice (an atomic batch's rules), naming each bad line.
func checkBatch(client *ax.Client, file string, tasks []batchLine) error {
	var bad []string
	tenant := func(s ax.TaskSpec) string {
		if s.Tenant == "" {
			return ax.DefaultTenant
		}
		return s.Tenant
	}
	seen := map[string]int{}
	for _, t := range tasks {
		switch err := client.Validate(t.spec); {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s:%d: %s", file, t.line, err))
		case tenant(t.spec) != tenant(tasks[0].spec):
			bad = append(bad, fmt.Sprintf("%s:%d: tenant %q, line %d's is %q: a batch is of one tenant", file, t.line, tenant(t.spec), tasks[0].line, tenant(tasks[0].spec)))
		case t.spec.ID != "" && seen[t.spec.ID] != 0:
			bad = append(bad, fmt.Sprintf("%s:%d: id %q is line %d's too", file, t.line, t.spec.ID, seen[t.spec.ID]))
		case t.spec.ID != "":
			seen[t.spec.ID] = t.line
		}
	}
	return batchErrors(file, bad)
}

// batchErrors is the error naming the bad lines, nil without one.
func batchErrors(file string, bad []string) error {
	if len(bad) == 0 {
		return nil
	}
	total, more := len(bad), ""
	if len(bad) > maxBatchErrors {
		more = fmt.Sprintf("\n(and %d more bad lines)", len(bad)-maxBatchErrors)
		bad = bad[:maxBatchErrors]
	}
	return fmt.Errorf("%w: --batch %s: %d bad lines; nothing submitted:\n%s%s", ax.ErrInvalidTask, file, total, strings.Join(bad, "\n"), more)
}

// submitBatch is `ax submit --batch FILE`: every task of the file, all or
// nothing ([ax.Atomic]).
func (e *env) submitBatch(cmd *cobra.Command, file string, publishOnly bool) error {
	data, err := readPayload(cmd.InOrStdin(), file)
	if err != nil {
		return fmt.Errorf("--batch: %w", errors.Unwrap(err))
	}
	tasks, err := readBatch(data, file)
	if err != nil {
		return err
	}
	nc, js, err := e.connect("ax submit", roleService)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx := cmd.Context()
	client, err := e.submitClient(ctx, js, publishOnly)
	if err != nil {
		return err
	}
	if err := checkBatch(client, file, tasks); err != nil {
		return err
	}
	specs := make([]ax.TaskSpec, len(tasks))
	allIDs := true
	for i, t := range tasks {
		specs[i] = t.spec
		allIDs = allIDs && t.spec.ID != ""
	}
	infos, err := client.SubmitBatch(ctx, specs, ax.Atomic())
	if err != nil {
		return e.batchFailed(ctx, infos, allIDs, err)
	}
	if e.jsonOut {
		return writeJSON(e.out, infos)
	}
	for _, info := range infos {
		fmt.Fprintln(e.out, info.ID)
	}
	return nil
}

// batchFailed is the error of a failed atomic batch: not stored, or (exit
// 3) perhaps stored, with what to do.
func (e *env) batchFailed(ctx context.Context, infos []ax.TaskInfo, allIDs bool, err error) error {
	var first ax.TaskInfo
	if len(infos) > 0 {
		first = infos[0]
	}
	failed := e.submitFailed(ctx, first, err)
	if _, maybe := failed.(maybeStoredError); !maybe {
		return failed
	}
	again := "submitting the file again is safe: every line sets its id"
	if !allIDs {
		again = "the lines without an id got new ids: submitting the file again may run those tasks twice (give each line an id to make a retry safe)"
	}
	return maybeStoredError{err: err, msg: fmt.Sprintf("%s; the batch is stored whole or not at all: `ax task get %s --tenant %s` tells; %s", err, first.ID, first.Tenant, again)}
}
