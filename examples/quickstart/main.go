// Command quickstart is a producer and a worker in one program: it joins
// the mesh of the server NATS_URL names (default nats://127.0.0.1:4222,
// `ax dev`'s), waits until its worker serves its shards, submits three
// "resize" tasks at three priorities, and prints each one's result.
//
//	go run ./cmd/ax dev --demo 0 --workers 0   # in one terminal
//	go run ./examples/quickstart               # in another
//
// With --workers 0 its worker is the mesh's only one; beside ax dev's
// built-in workers it works too (they hand its type back within
// milliseconds).
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
)

// Resize is the payload of a "resize" task: its type and shape are written
// once, for the producer and the handler.
type Resize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// Kind names the task type of [Resize] args.
func (Resize) Kind() string { return "resize" }

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

	// The worker: a typed handler, run in a goroutine until ctx ends.
	reg := worker.NewRegistry()
	err = worker.HandleArgs(reg, func(ctx context.Context, t *worker.Task, r Resize) error {
		if err := t.Progress(ctx, 50, "halfway"); err != nil {
			return err
		}
		return t.SetResultJSON(map[string]string{"thumbnail": fmt.Sprintf("%s@%dw", r.Image, r.Width)})
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
	select {
	case <-w.Ready(): // it serves its shards: what is submitted now starts in priority order
	case err := <-done:
		return fmt.Errorf("start worker: %w", err)
	}

	// The producer: typed args, a priority each.
	client, err := ax.NewClient(ctx, js, nil)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	var tasks []ax.TaskInfo
	for i, p := range []ax.Priority{ax.P0, ax.P2, ax.P4} {
		info, err := client.SubmitJSON(ctx, Resize{Image: fmt.Sprintf("cat-%d.png", i), Width: 320}, &ax.TaskSpec{Priority: p})
		if err != nil {
			return fmt.Errorf("submit: %w", err)
		}
		fmt.Printf("submitted %s at %s\n", info.ID, info.Priority)
		tasks = append(tasks, info)
	}
	for _, info := range tasks {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		result, err := client.Wait(waitCtx, info.Tenant, info.ID)
		cancel()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", info.ID, err)
		}
		fmt.Printf("%s done: %s (ax task trail %s)\n", info.ID, result, info.ID)
	}

	stopWorker()
	return <-done
}
