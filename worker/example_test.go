package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Email is the payload of an "email" task.
type Email struct {
	To string `json:"to"`
}

var errBadAddress = errors.New("bad address")

// A typed handler gets the payload decoded; its error decides the task's
// outcome: nil succeeds, Permanent dead-letters at once, any other error is
// retried with backoff.
func ExampleHandleJSON() {
	reg := worker.NewRegistry()
	err := worker.HandleJSON(reg, "email", func(ctx context.Context, task *worker.Task, msg Email) error {
		if msg.To == "" {
			return worker.Permanent(errBadAddress)
		}
		fmt.Println("send to", msg.To)
		return nil
	}, &worker.TypeConfig{Timeout: 10 * time.Second})
	fmt.Println(err)
	// Output:
	// <nil>
}

// A worker's main: register handlers, then Run until the context ends (a
// signal, in a real main). Run starts the worker, and on return has stopped
// it, letting running handlers finish.
func ExampleWorker_Run() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, stop := axtest.RunDeployment(ctx)
	defer stop()

	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}

	sent := make(chan string, 1)
	reg := worker.NewRegistry()
	_ = worker.HandleJSON(reg, "email", func(ctx context.Context, task *worker.Task, msg Email) error {
		sent <- msg.To
		return nil
	}, nil)
	w, err := worker.New(ctx, js, &worker.Config{Registry: reg, Concurrency: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready(): // it serves its shards: what is submitted now starts in priority order
	case err := <-done:
		fmt.Println(err)
		return
	}

	client, _ := ax.NewClient(ctx, js, nil)
	defer func() { _ = client.Close() }()
	info, _ := client.Submit(ctx, ax.TaskSpec{Type: "email", Payload: []byte(`{"to":"ada@example.com"}`)})
	fmt.Println("sent to", <-sent)
	_, err = client.Wait(ctx, info.Tenant, info.ID) // until it succeeds, or why not
	fmt.Println("succeeded:", err == nil)
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// sent to ada@example.com
	// succeeded: true
	// stopped: <nil>
}

// Welcome is the args of a "welcome" task: its kind and payload shape are
// written once, for the producer and the handler.
type Welcome struct {
	To string `json:"to"`
}

// Kind names the task type of [Welcome] args.
func (Welcome) Kind() string { return "welcome" }

// The producer submits typed args with SubmitJSON and the worker handles
// the same Go type with HandleArgs: neither writes the type string or the
// payload's encoding.
func ExampleHandleArgs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, stop := axtest.RunDeployment(ctx)
	defer stop()

	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}

	sent := make(chan string, 1)
	reg := worker.NewRegistry()
	_ = worker.HandleArgs(reg, func(ctx context.Context, task *worker.Task, args Welcome) error {
		sent <- task.Type + " to " + args.To
		return nil
	}, nil)
	w, _ := worker.New(ctx, js, &worker.Config{Registry: reg})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready(): // it serves its shards: what is submitted now starts in priority order
	case err := <-done:
		fmt.Println(err)
		return
	}

	client, _ := ax.NewClient(ctx, js, nil)
	defer func() { _ = client.Close() }()
	info, err := client.SubmitJSON(ctx, Welcome{To: "ada@example.com"}, &ax.TaskSpec{Tenant: "acme"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = client.Wait(ctx, info.Tenant, info.ID) // until it succeeds, or why not
	fmt.Println("succeeded:", err == nil)
	select {
	case handled := <-sent:
		fmt.Println(handled)
	default:
		fmt.Println("not handled")
	}
	cancel()
	<-done
	// Output:
	// succeeded: true
	// welcome to ada@example.com
}
