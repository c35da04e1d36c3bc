package leader_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/leader"
)

// Every `ax scheduler` process runs a leader; one of them leads at a time and
// runs the control loops (delayed release, cron, aging, backpressure, the
// reconciler) until its context ends.
func ExampleLeader_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, stop := natstest.Example(ctx)
	defer stop()

	l, err := leader.New(ctx, js, nil)
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
