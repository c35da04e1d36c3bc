package worker_test

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax/worker"
)

// Code deep in a handler reads the task, its tenant and id, from its
// context: the worker runs every handler inside [worker.TaskContext].
func ExampleTaskFromContext() {
	table := func(ctx context.Context) string {
		task, ok := worker.TaskFromContext(ctx)
		if !ok {
			return "public.orders"
		}
		return task.Tenant + ".orders"
	}
	handler := func(ctx context.Context, task *worker.Task) error {
		fmt.Println("task", task.ID, "writes", table(ctx))
		return nil
	}
	// The worker composes the chain itself; called directly here:
	_ = worker.TaskContext()(handler)(context.Background(), &worker.Task{ID: "t1", Tenant: "acme"})
	// Output:
	// task t1 writes acme.orders
}

// The worker's own middleware can be reused around a handler, here the
// panic recovery: a panic is a permanent failure, never retried.
func ExampleRecover() {
	handler := func(ctx context.Context, task *worker.Task) error {
		var rows []string
		fmt.Println(rows[task.Attempt])
		return nil
	}
	err := worker.Recover(nil)(handler)(context.Background(), &worker.Task{ID: "t1", Attempt: 1})
	fmt.Println(err)
	// Output:
	// permanent: handler panicked: runtime error: index out of range [1] with length 0
}
