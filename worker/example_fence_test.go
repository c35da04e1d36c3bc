package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/axtype"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errStaleFence is what the ledger answers an execution older than one it
// has seen.
var errStaleFence = errors.New("stale execution: a newer one of this task has written")

// ledgerEntry is the side effect of a task, with the fence that wrote it.
type ledgerEntry struct {
	Fence  worker.Fence `json:"fence"`
	Amount int          `json:"amount"`
}

// charge writes a task's side effect to the ledger, conditionally on its
// fence: it refuses a fence lower than the one stored, and the write is a
// compare-and-set on the entry's revision, so that two executions racing
// here cannot both win (the loser reads again and is refused or retries).
func charge(ctx context.Context, ledger jetstream.KeyValue, fence worker.Fence, amount int) error {
	var rev uint64
	entry, err := ledger.Get(ctx, fence.Task)
	switch {
	case err == nil:
		var seen ledgerEntry
		if err := json.Unmarshal(entry.Value(), &seen); err != nil {
			return err
		}
		if fence.Less(seen.Fence) {
			return errStaleFence
		}
		rev = entry.Revision()
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return err
	}
	data, err := json.Marshal(ledgerEntry{Fence: fence, Amount: amount})
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = ledger.Create(ctx, fence.Task, data)
	} else {
		_, err = ledger.Update(ctx, fence.Task, data, rev)
	}
	return err
}

// A handler checks Held right before its side effect, and the effect's
// store refuses a write whose fence is older than one it has seen: a stale
// execution (frozen past its claim, then resumed) can neither start its
// effect after the check fails nor overwrite the effect of the execution
// that took the task over.
func ExampleTask_Fence() {
	ctx := context.Background()
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
	ledger, _ := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LEDGER"})

	reg := worker.NewRegistry()
	_ = worker.HandleJSON(reg, "charge", func(ctx context.Context, task *worker.Task, amount int) error {
		if !task.Held() {
			return context.Cause(ctx) // no effect: the task is not ours any more
		}
		return charge(ctx, ledger, task.Fence(), amount)
	}, nil)
	w, _ := worker.New(ctx, js, &worker.Config{Registry: reg, Shards: []int{deploy.Shard("order-1")}})
	_ = w.Start(ctx)
	defer func() { _ = w.Stop(ctx) }()

	client, _ := ax.NewClient(ctx, js, nil)
	_, _ = client.Submit(ctx, ax.TaskSpec{ID: "order-1", Type: "charge", Key: "order-1", Payload: []byte("42")})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rec, err := client.Get(ctx, ax.DefaultTenant, "order-1"); err == nil && rec.State == axtype.StateSucceeded {
			break
		}
	}
	entry, _ := ledger.Get(ctx, "order-1")
	var written ledgerEntry
	_ = json.Unmarshal(entry.Value(), &written)
	fmt.Println("charged", written.Amount, "by attempt with revision > 0:", written.Fence.Revision > 0)

	// An older execution of the same task, resumed after a freeze, is refused.
	stale := written.Fence
	stale.Revision--
	fmt.Println(errors.Is(charge(ctx, ledger, stale, 42), errStaleFence))
	// Output:
	// charged 42 by attempt with revision > 0: true
	// true
}
