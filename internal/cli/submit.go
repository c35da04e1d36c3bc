package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func addSubmit(root *cobra.Command, e *env) {
	var t ax.TaskSpec
	var payload, payloadFile string
	var priority string
	var deadline string
	var runAt string
	var publishOnly, wait bool
	var batch string
	var unique ax.UniqueOpts
	var uniqueStates []string
	cmd := &cobra.Command{
		Use:   "submit TYPE | --batch FILE",
		Short: "Submit one task, or a file of tasks all or nothing",
		Example: `  ax submit sleep --payload '{"ms":100}' --priority p1 --tenant acme
  ax submit echo --payload hello --id order-42
  ax submit echo --payload later --delay 30s
  ax submit report --payload '{"day":"2026-12-01"}' --unique-for 1h
  ax submit rebuild --unique-key index --unique-for 10m --unique-states pending,ready,running,retrying
  ax submit echo --payload hi --wait
  NATS_USER=service ax submit echo --payload hi --publish-only
  ax submit --batch tasks.jsonl     # JSON lines, one task a line; all or nothing

  {"id": "mail-1", "type": "mail", "tenant": "acme", "payload": "eyJ0byI6ImEifQ=="}
  {"id": "mail-2", "type": "mail", "tenant": "acme", "priority": "p1"}`,
		Args: func(cmd *cobra.Command, args []string) error {
			if batch == "" {
				return cobra.ExactArgs(1)(cmd, args)
			}
			if len(args) > 0 {
				return fmt.Errorf("ax submit --batch takes no TYPE (%q): each line of the file names its type", args[0])
			}
			var set []string
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if !slices.Contains([]string{"batch", "publish-only"}, f.Name) && cmd.LocalFlags().Lookup(f.Name) != nil {
					set = append(set, "--"+f.Name)
				}
			})
			if len(set) > 0 {
				return fmt.Errorf("ax submit --batch: %s set the fields of one task; with --batch each line of the file sets its own", strings.Join(set, ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if batch != "" {
				if !cmd.Flags().Changed("publish-only") && publishOnlyUser(e.userName()) {
					publishOnly = true
				}
				return e.submitBatch(cmd, batch, publishOnly)
			}
			t.Type = args[0]
			t.Payload = []byte(payload)
			if payloadFile != "" {
				if payload != "" {
					return fmt.Errorf("--payload and --payload-file are both set; set one")
				}
				data, err := readPayload(cmd.InOrStdin(), payloadFile)
				if err != nil {
					return err
				}
				t.Payload = data
			}
			p, err := parsePriorityFlag(priority)
			if err != nil {
				return err
			}
			t.Priority = ax.PriorityOf(p)
			if deadline != "" {
				d, err := time.Parse(time.RFC3339, deadline)
				if err != nil {
					return fmt.Errorf("--deadline %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", deadline)
				}
				t.Deadline = d
			}
			if runAt != "" {
				at, err := time.Parse(time.RFC3339Nano, runAt)
				if err != nil {
					return fmt.Errorf("--run-at %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", runAt)
				}
				t.RunAt = at
			}
			if unique.For != 0 {
				for _, s := range uniqueStates {
					unique.States = append(unique.States, kv.State(strings.ToUpper(strings.TrimSpace(s))))
				}
				t.Unique = &unique
			} else if unique.Key != "" || len(uniqueStates) > 0 {
				return fmt.Errorf("--unique-key and --unique-states need --unique-for (the period)")
			}
			user := e.userName()
			if !cmd.Flags().Changed("publish-only") && publishOnlyUser(user) {
				publishOnly = true // the role may only publish (docs/ax-permissions.conf)
			}
			if wait && publishOnly {
				if !cmd.Flags().Changed("publish-only") {
					return fmt.Errorf("--wait watches the task's record, which user %s may not read: it submits --publish-only (its role may only publish); read the result later with ax task result ID as the operator", user)
				}
				return fmt.Errorf("--wait watches the task's record, which a --publish-only producer may not read; read the result later with ax task result ID")
			}
			nc, js, err := e.connect("ax submit", roleService)
			if err != nil {
				return err
			}
			defer nc.Close()
			client, err := e.submitClient(cmd.Context(), js, publishOnly)
			if err != nil {
				return err
			}
			info, err := client.Submit(cmd.Context(), t)
			if err != nil {
				return e.submitFailed(cmd.Context(), info, err)
			}
			if wait {
				return e.waitResult(cmd.Context(), client, info)
			}
			if e.jsonOut {
				return writeJSON(e.out, info)
			}
			dup := ""
			switch {
			case info.UniqueSkipped:
				dup = " (duplicate: this task holds the unique key; nothing published)"
			case info.Duplicate:
				dup = " (duplicate: already submitted)"
			}
			fmt.Fprintf(e.out, "%s%s\n", info.ID, dup)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&t.ID, "id", "", "task id (default: a new nuid)")
	f.StringVar(&payload, "payload", "", "task payload")
	f.StringVar(&payloadFile, "payload-file", "", `read the payload from this file ("-": standard input), for payloads beyond a command line's limit`)
	f.StringVarP(&priority, "priority", "p", string(ax.DefaultPriority), "priority p0 (highest) .. p4")
	f.StringVar(&t.Tenant, "tenant", ax.DefaultTenant, "tenant")
	f.StringVar(&t.Key, "key", "", "partition key (default: the task id)")
	f.DurationVar(&t.Timeout, "timeout", 0, "timeout of one attempt (default: the worker's)")
	f.IntVar(&t.MaxAttempts, "max-attempts", 0, "attempts before the task is dead (default: the worker's)")
	f.BoolVar(&t.Core, "core", false, "core task, published on ax.core.p<N>.… (needs that permission): accepted while the bucket refuses others")
	f.StringVar(&deadline, "deadline", "", "RFC 3339 time after which the task is not started")
	f.StringVar(&runAt, "run-at", "", "RFC 3339 time the task becomes due (PENDING until then)")
	f.DurationVar(&t.Delay, "delay", 0, "delay the task by this long (PENDING until then)")
	f.BoolVar(&publishOnly, "publish-only", false, "only publish the task, as a producer allowed only to submit does: no record is written at submit, the worker that first sees the task writes it, and a delayed task is deferred by a worker (default: true as the users service, core-service and producer-<tenant> of docs/ax-permissions.conf)")
	f.BoolVar(&wait, "wait", false, "wait until the task ends (a watch of its record) and print its result (raw bytes; with --json the task and its result); a task that ends DEAD or CANCELLED fails the command with its last error")
	f.DurationVar(&unique.For, "unique-for", 0, "unique for this period (at least 1s): while a task of the tenant and type with the same payload (or --unique-key) is in one of --unique-states, print its id and publish nothing")
	f.StringVar(&unique.Key, "unique-key", "", "with --unique-for: unique by this key instead of the payload")
	f.StringSliceVar(&uniqueStates, "unique-states", nil, "with --unique-for: the states in which the earlier task blocks a new one (default: every state but dead and cancelled)")
	f.StringVar(&batch, "batch", "", `submit the tasks of this file ("-": standard input) all or nothing: JSON lines, one task a line in the task JSON shape (docs/API.md, "ax submit --batch"); a bad line submits nothing`)
	root.AddCommand(cmd)
}

// submitFailed returns the error of a failed submit of info: the
// refusal when the server refused the task's publish or a step before it
// (not stored), else, when the task was published and its acknowledgement
// could not be read, one that says so and that [Execute] ends with
// [ExitMaybeStored].
func (e *env) submitFailed(ctx context.Context, info ax.TaskInfo, err error) error {
	var refused, named *denied.Error
	if errors.As(context.Cause(ctx), &refused) && (refused.Op == denied.OpPublish && e.isSubmitSubject(refused.Subject) || !errors.Is(err, ax.ErrMaybeStored)) {
		// The publish, or a step before it, refused: not stored.
		if errors.As(err, &named) {
			return named // with the hint of the step refused
		}
		return refused
	}
	if !errors.Is(err, ax.ErrMaybeStored) {
		return err
	}
	next := fmt.Sprintf("`ax task get %s --tenant %s` tells, and a submit again with --id %s is safe (a new id may run it twice)", info.ID, info.Tenant, info.ID)
	if refused == nil { // a timeout, a lost connection, a record not written
		return maybeStoredError{err: err, msg: fmt.Sprintf("%s; %s", err, next)}
	}
	return maybeStoredError{err: err, msg: fmt.Sprintf("published %s; its acknowledgement could not be read: the server refused user %s %s; the task may be stored and run: %s",
		info.ID, cmp.Or(refused.User, "(unknown)"), refused.Refusal(), next)}
}

// isSubmitSubject says whether subject is a task's submit subject.
func (e *env) isSubmitSubject(subject string) bool {
	names, err := e.names()
	if err != nil {
		return false
	}
	return strings.HasPrefix(subject, names.Prefix()+".submit.") || strings.HasPrefix(subject, names.Prefix()+".core.")
}

// maybeStoredError is a submit that may have stored its task
// ([ax.ErrMaybeStored]), with the message of ax submit.
type maybeStoredError struct {
	err error
	msg string
}

func (m maybeStoredError) Error() string { return m.msg }
func (m maybeStoredError) Unwrap() error { return m.err }

// waitResult waits for the end of the submitted task and prints its result.
func (e *env) waitResult(ctx context.Context, client *ax.Client, info ax.TaskInfo) error {
	result, err := client.Wait(ctx, info.Tenant, info.ID)
	if err != nil {
		return err
	}
	if e.jsonOut {
		return writeJSON(e.out, struct {
			Task   ax.TaskInfo `json:"task"`
			Result []byte      `json:"result"`
		}{info, result})
	}
	_, err = e.out.Write(result)
	return err
}

// readPayload reads a payload from path, or from stdin when path is "-".
func readPayload(stdin io.Reader, path string) ([]byte, error) {
	if path == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("--payload-file -: read standard input: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--payload-file: %w", err)
	}
	return data, nil
}

// parsePriorityFlag accepts "p0".."p4" or "0".."4".
func parsePriorityFlag(s string) (int, error) {
	if len(s) == 1 {
		s = "p" + s
	}
	if len(s) != 2 || s[0] != 'p' || s[1] < '0' || s[1] > '4' {
		return 0, fmt.Errorf("--priority %q: want p0 (highest) .. p4", s)
	}
	return int(s[1] - '0'), nil
}
