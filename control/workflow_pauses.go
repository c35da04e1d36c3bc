package control

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// PausedWorkflows lists the workflows paused now: each
// [WorkflowPausedKey] that board holds, in one listing (a watch of the
// prefix that ends once the keys there are read), so that a page of
// workflows costs one request whatever its length.
func PausedWorkflows(ctx context.Context, board jetstream.KeyValue) (map[string]bool, error) {
	lister, err := board.ListKeysFiltered(ctx, WorkflowPausedPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("list the paused workflows: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	paused := map[string]bool{}
	for key := range lister.Keys() {
		paused[key] = true
	}
	if err := ctx.Err(); err != nil { // the listing stopped early
		return nil, fmt.Errorf("list the paused workflows: %w", err)
	}
	return paused, nil
}
