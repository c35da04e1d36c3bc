package ax_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A service submits a task: it is stored in its priority bucket and its
// record is READY until a worker claims it.
func ExampleClient_Submit() {
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

	client, err := ax.NewClient(ctx, js, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close() }()
	info, err := client.Submit(ctx, ax.TaskSpec{ID: "welcome-42", Type: "email", Tenant: "acme",
		Priority: ax.P1, Payload: []byte(`{"to":"ada@example.com"}`), Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, _ := client.Get(ctx, info.Tenant, info.ID)
	fmt.Println(info.ID, info.Stream, rec.State)
	// Output:
	// welcome-42 AX_P1 READY
}

// Email is the payload of an "email" task.
type Email struct {
	To string `json:"to"`
}

// Kind names the task type of [Email] args.
func (Email) Kind() string { return "email" }

// A service's submit code, as in the README: typed args, a delayed task, a
// task of raw bytes and a cron job, with one import of ax.
func ExampleClient_SubmitJSON() {
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

	client, err := ax.NewClient(ctx, js, nil) // the default deployment
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close() }()
	info, err := client.SubmitJSON(ctx, Email{To: "ada@example.com"}, &ax.TaskSpec{Tenant: "acme",
		Priority: ax.P1, Timeout: 10 * time.Second, MaxAttempts: 5})
	if err != nil {
		fmt.Println(err)
		return
	}
	later, _ := client.SubmitJSON(ctx, Email{To: "bob@example.com"}, &ax.TaskSpec{Delay: time.Hour})
	raw, _ := client.Submit(ctx, ax.TaskSpec{Type: "resize", Payload: []byte("image")})
	_, err = client.AddCron(ctx, ax.CronJob{Name: "digest", Spec: "0 7 * * *", Task: ax.TaskSpec{Type: "digest"}})
	fmt.Println(info.Type, info.Stream)
	rec, _ := client.Get(ctx, later.Tenant, later.ID)
	fmt.Println(later.Type, rec.State)
	fmt.Println(raw.Type, raw.Stream)
	fmt.Println("cron added:", err == nil)
	// Output:
	// email AX_P1
	// email PENDING
	// resize AX_P2
	// cron added: true
}

// A unique task: a second submit of the same report within the hour
// publishes nothing and names the first task.
func ExampleUniqueOpts() {
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

	client, err := ax.NewClient(ctx, js, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close() }()
	report := func(id string) ax.TaskInfo {
		info, err := client.SubmitJSON(ctx, Email{To: "ops@example.com"}, &ax.TaskSpec{ID: id, Tenant: "acme",
			Unique: &ax.UniqueOpts{For: time.Hour}}) // unique by args; Key: "…" for unique by a key
		if err != nil {
			fmt.Println(err)
		}
		return info
	}
	first, again := report("digest-1"), report("digest-2")
	fmt.Println(first.ID, first.UniqueSkipped)
	fmt.Println(again.ID, again.UniqueSkipped)
	// Output:
	// digest-1 false
	// digest-1 true
}
