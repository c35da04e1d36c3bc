package ax_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A submit hook adds a header to every task a client submits (a tracer
// injects its trace context the same way) and hears each outcome; the
// handler finds the header, and the producer waits for the result.
func ExampleSubmitHook() {
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
	_ = reg.Handle("greet", func(ctx context.Context, task *worker.Task) error {
		task.SetResult([]byte("hello from request " + task.Headers.Get("Ax-Request-Id")))
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

	requestID := func(ctx context.Context, task ax.TaskSpec, header nats.Header) (func(ax.TaskInfo, error), error) {
		header.Set("Ax-Request-Id", "req-7")
		return func(info ax.TaskInfo, err error) { fmt.Println("submitted", info.Type, err) }, nil
	}
	client, _ := ax.NewClient(ctx, js, &ax.Config{SubmitHooks: []ax.SubmitHook{requestID}})
	defer func() { _ = client.Close() }()
	info, _ := client.Submit(ctx, ax.TaskSpec{Type: "greet"})
	waitCtx, stopWait := context.WithTimeout(ctx, 10*time.Second)
	defer stopWait()
	result, err := client.Wait(waitCtx, info.Tenant, info.ID)
	fmt.Println(string(result), err)
	cancel()
	<-done
	// Output:
	// submitted greet <nil>
	// hello from request req-7 <nil>
}
