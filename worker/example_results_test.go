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

// A handler sets its task's result and reports progress; the producer
// waits for the end with Client.Wait (a watch of the task's record, no
// polling) and gets the result, or the final state and last error.
func ExampleTask_SetResult() {
	ctx, cancel := context.WithCancel(context.Background())
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

	reg := worker.NewRegistry()
	_ = reg.Handle("resize", func(ctx context.Context, task *worker.Task) error {
		if err := task.Progress(ctx, 50, "half way"); err != nil {
			return err
		}
		return task.SetResultJSON(map[string]string{"url": "https://img.example.com/" + string(task.Payload)})
	}, nil)
	_ = reg.Handle("refuse", func(ctx context.Context, task *worker.Task) error {
		return worker.Permanent(errors.New("unsupported format"))
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
	waitCtx, stopWait := context.WithTimeout(ctx, 10*time.Second)
	defer stopWait()

	info, _ := client.Submit(ctx, ax.TaskSpec{Type: "resize", Tenant: "acme", Payload: []byte("cat.png")})
	result, err := client.Wait(waitCtx, info.Tenant, info.ID)
	fmt.Println(string(result), err)

	info, _ = client.Submit(ctx, ax.TaskSpec{Type: "refuse", Tenant: "acme"})
	_, err = client.Wait(waitCtx, info.Tenant, info.ID)
	var ended *ax.TaskEndedError
	if errors.As(err, &ended) {
		fmt.Println(ended.State, ended.LastError)
	}
	cancel()
	<-done
	// Output:
	// {"url":"https://img.example.com/cat.png"} <nil>
	// DEAD permanent: unsupported format
}

// Middleware wraps every handler of a worker, the first outermost: here
// one that logs each task's type and outcome around the handler.
func ExampleMiddleware() {
	logged := func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, task *worker.Task) error {
			err := next(ctx, task)
			fmt.Println(task.Type, "done:", err)
			return err
		}
	}
	handler := func(ctx context.Context, task *worker.Task) error { return nil }
	cfg := &worker.Config{Middleware: []worker.Middleware{logged}}
	// The worker runs each task through the chain; called directly here:
	_ = cfg.Middleware[0](handler)(context.Background(), &worker.Task{Type: "email"})
	// Output:
	// email done: <nil>
}
