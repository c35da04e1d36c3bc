package scheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every `ax scheduler` process runs a leader; one of them leads at a time and
// runs the control loops (delayed release, cron, aging, backpressure, the
// reconciler) until its context ends.
func ExampleLeader_Run() {
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

	l, err := scheduler.New(ctx, js, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); !l.Leading() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("leading:", l.Leading())
	cancel()
	<-done
	fmt.Println("leading after Run returned:", l.Leading())
	// Output:
	// leading: true
	// leading after Run returned: false
}
