// Command workflow runs a workflow: it joins the mesh of the server
// NATS_URL names (default nats://127.0.0.1:4222, `ax dev`'s), submits an
// order's workflow (charge, then ship and invoice side by side, then a
// mail that reads both results), and prints the mail's result.
//
//	go run ./cmd/ax dev --demo 0 --workers 0   # in one terminal
//	go run ./examples/workflow                 # in another
//
// ax dev's leader releases each task once its parents succeeded.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	url := cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL)
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	// The worker: each step says what it did; the mail reads its parents.
	reg := worker.NewRegistry()
	for step, done := range map[string]string{"charge": "charged", "ship": "shipped", "invoice": "invoiced"} {
		err := reg.Handle(step, func(ctx context.Context, t *worker.Task) error {
			return t.SetResultJSON(done + " " + string(t.Payload))
		}, nil)
		if err != nil {
			return err
		}
	}
	err = reg.Handle("mail", func(ctx context.Context, t *worker.Task) error {
		var shipped, invoiced string
		if err := t.ParentResult(ctx, "ship", &shipped); err != nil {
			return err
		}
		if err := t.ParentResult(ctx, "invoice", &invoiced); err != nil {
			return err
		}
		return t.SetResultJSON("mailed: " + shipped + ", " + invoiced)
	}, nil)
	if err != nil {
		return err
	}
	w, err := worker.New(ctx, js, &worker.Config{Registry: reg, Concurrency: 4})
	if err != nil {
		return fmt.Errorf("new worker (is the deployment provisioned? ax dev does it): %w", err)
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	done := make(chan error, 1)
	go func() { done <- w.Run(workerCtx) }()

	client, err := ax.NewClient(ctx, js, nil)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()

	// The workflow: all of it is stored, or none.
	order := []byte("order-" + nuid.Next()[:6])
	wf := ax.NewWorkflow(string(order))
	wf.Add("charge", ax.TaskSpec{Type: "charge", Payload: order})
	wf.Add("ship", ax.TaskSpec{Type: "ship", Payload: order}, "charge")
	wf.Add("invoice", ax.TaskSpec{Type: "invoice", Payload: order}, "charge")
	wf.Add("mail", ax.TaskSpec{Type: "mail"}, "ship", "invoice")
	if _, err := client.SubmitWorkflow(ctx, wf); err != nil {
		return fmt.Errorf("submit workflow: %w", err)
	}
	fmt.Printf("submitted workflow %s (ax workflow get %s)\n", wf.ID, wf.ID)

	// Wait watches the mail's record, which its release writes.
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	result, err := client.Wait(waitCtx, ax.DefaultTenant, wf.TaskID("mail"))
	if err != nil {
		return fmt.Errorf("wait for %s: %w", wf.TaskID("mail"), err)
	}
	fmt.Printf("%s: %s\n", wf.TaskID("mail"), result)
	stopWorker()
	return <-done
}
