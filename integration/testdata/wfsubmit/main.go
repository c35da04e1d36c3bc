// Command wfsubmit submits one large workflow or atomic batch, for the
// integration tests that SIGKILL a submitter part way
// (integration/workflow_parts_test.go). It connects as NATS_USER with
// NATS_PASSWORD to NATS_URL, with a publish-only client, as a tenant's
// producer does.
//
//	wfsubmit workflow ID   a workflow of 6 tasks (a chain), ~4.7 MiB: 5 parts
//	wfsubmit batch PREFIX  an atomic batch of 40 tasks PREFIX-0..39, ~5.3 MiB: 6 parts
//
// It prints "submitting" before it builds the submit and "submitted" once
// the submit returned nil.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "wfsubmit:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 3 {
		return fmt.Errorf("usage: wfsubmit workflow|batch ID")
	}
	user := os.Getenv("NATS_USER")
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.UserInfo(user, os.Getenv("NATS_PASSWORD")),
		nats.CustomInboxPrefix(nats.InboxPrefix+user))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ax.NewClient(ctx, js, &ax.Config{PublishOnly: true})
	if err != nil {
		return err
	}
	fmt.Println("submitting") // what was killed after this line and before "submitted" died in the submit
	payload := []byte(`{"pad":"` + strings.Repeat("x", 600<<10) + `"}`)
	switch mode, id := os.Args[1], os.Args[2]; mode {
	case "workflow":
		wf := &ax.Workflow{ID: id, Tenant: "acme"}
		prev := []string(nil)
		for i := range 6 {
			name := fmt.Sprintf("s%d", i)
			wf.Add(name, ax.TaskSpec{Type: "echo", Payload: payload}, prev...)
			prev = []string{name}
		}
		if _, err := client.SubmitWorkflow(ctx, wf); err != nil {
			return err
		}
	case "batch":
		small := payload[:100<<10]
		var specs []ax.TaskSpec
		for i := range 40 {
			specs = append(specs, ax.TaskSpec{ID: fmt.Sprintf("%s-%d", id, i), Tenant: "acme", Type: "echo", Payload: small})
		}
		if _, err := client.SubmitBatch(ctx, specs, ax.Atomic()); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	fmt.Println("submitted")
	return nil
}
