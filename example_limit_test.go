package ax_test

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Limits and pauses from Go take the client alone: a type's concurrency,
// a tenant's rate, a pause of a type, each in one call that answers the
// limits after the change.
func ExampleClient_SetLimit() {
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
	js, _ := jetstream.New(nc)
	// The management API, which ax scheduler and ax dev run.
	d, _ := deploy.Open(ctx, js, nil)
	api, _ := d.Admin(ctx, nil)
	if err := api.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = api.Stop(ctx) }()

	client, _ := ax.NewClient(ctx, js, nil)
	defer func() { _ = client.Close() }()
	if _, err := client.SetLimit(ctx, "resize", ax.Limit{Concurrency: 2}); err != nil {
		fmt.Println(err)
		return
	}
	_, _ = client.SetLimit(ctx, ax.TenantTarget("acme"), ax.Limit{Rate: 10})
	_, _ = client.Pause(ctx, "email")
	report, _ := client.Limits(ctx)
	for _, l := range report.Limits {
		fmt.Printf("%s: concurrency %d, rate %g/s\n", l.Target, l.Concurrency, l.Rate)
	}
	for _, p := range report.Paused {
		fmt.Println("paused:", p.Target)
	}
	_, _ = client.Resume(ctx, "email")
	report, _ = client.RemoveLimit(ctx, "resize")
	fmt.Println(len(report.Limits), "limit,", len(report.Paused), "paused")
	// Output:
	// resize: concurrency 2, rate 0/s
	// tenant:acme: concurrency 0, rate 10/s
	// paused: email
	// 1 limit, 0 paused
}
