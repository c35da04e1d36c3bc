// Package deploy opens an ax deployment: one handle that provisions (or
// verifies) its streams, consumers and buckets and reads from the server
// what every process must agree on, then builds the submit client, the
// worker, the leader and the management API from it.
//
// Safety: two processes that disagree on the deployment's names, the shard
// consumers' ack wait or the record store run tasks twice or lose sight of
// them (a leader judging RUNNING records by a shorter ack wait than the
// server's republishes tasks that still run). A [Deployment] fills these in
// every config it is given and refuses a config that names other values
// ([ErrMismatch]), so processes opened on one deployment cannot disagree.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrMismatch means a config given to a [Deployment] names a value that
// differs from the deployment's (names, ack wait or record store).
var ErrMismatch = errors.New("config disagrees with the deployment")

// Options configure [Open].
type Options struct {
	// Names of the deployment. Zero means [ax.DefaultNames].
	Names ax.Names
	// Provision creates or updates the streams, consumers and buckets with
	// Streams and Buckets (idempotent). False only verifies that they
	// exist, as a process that may not change them (a producer, a worker)
	// does.
	Provision bool
	// Streams configures the streams and consumers when Provision is set;
	// its Names are the deployment's. Nil means every default.
	Streams *StreamsConfig
	// Buckets configures the KV buckets when Provision is set; its Names
	// are the deployment's. Nil means every default.
	Buckets *BucketsConfig
	// Store configures the task record store (retention, trail stream)
	// every process of the deployment uses; its Names are the deployment's.
	Store ax.StoreConfig
}

// Deployment is an opened deployment: its names and record store as
// opened, and its ack wait and priority policy as the server holds them.
type Deployment struct {
	js          jetstream.JetStream
	names       streams.Names
	store       kv.StoreConfig
	ackWait     time.Duration
	policy      jetstream.PriorityPolicy
	provisioned *Provisioned
}

// Provisioned is what [Open] changed when it provisioned the deployment.
type Provisioned struct {
	// Streams lists the streams and consumers created and updated.
	Streams *StreamsReport
}

// Open provisions the deployment when opts.Provision is set, then reads
// the shard consumers' ack wait and priority policy from the server (from
// the bucket's metadata on a pools deployment) and
// checks that the record, worker and control buckets exist (the lock
// bucket, which only the leader uses, [Deployment.Leader] binds). A nil
// opts means the default deployment, verified only. It needs the rights of
// a worker, an operator or the scheduler (docs/ax-permissions.conf); a
// producer, which may only publish tasks, makes its client with
// ax.NewClient and [ax.Config.PublishOnly] instead. A permission the
// connection's user lacks fails it at once with an error naming the
// subject (it matches nats.ErrPermissionViolation).
func Open(ctx context.Context, js jetstream.JetStream, opts *Options) (*Deployment, error) {
	guard, ctx := denied.Watch(ctx, js.Conn())
	defer guard.Stop()
	d, err := open(ctx, js, opts)
	if refused := guard.Err(nil); err != nil && refused != nil {
		var named *denied.Error
		if errors.As(refused, &named) && (opts == nil || !opts.Provision) && named.Hint == "" &&
			named.Subject == jetstream.DefaultAPIPrefix+"STREAM.INFO."+namesOf(opts).PriorityStream(0) {
			// Every role but a producer may read the first bucket's info.
			named.Hint = producerHint
		}
		return nil, fmt.Errorf("open deployment: %w", refused)
	}
	return d, err
}

// producerHint is what a producer refused the first read of [Open] does
// instead (ax.NewClient says the same).
const producerHint = "a producer allowed only to submit sets Config.PublishOnly (ax submit --publish-only)"

// namesOf returns the names opts gives (the default's when nil).
func namesOf(opts *Options) streams.Names {
	if opts == nil {
		return streams.Names{}
	}
	return opts.Names
}

func open(ctx context.Context, js jetstream.JetStream, opts *Options) (*Deployment, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var provisioned *Provisioned
	if o.Provision {
		scfg := streams.Config{}
		if o.Streams != nil {
			scfg = *o.Streams
		}
		scfg.Names = o.Names
		report, err := streams.Provision(ctx, js, &scfg)
		if err != nil {
			return nil, fmt.Errorf("open deployment: %w", err)
		}
		bcfg := kv.BucketsConfig{}
		if o.Buckets != nil {
			bcfg = *o.Buckets
		}
		bcfg.Names = o.Names
		if err := kv.Provision(ctx, js, &bcfg); err != nil {
			return nil, fmt.Errorf("open deployment: %w", err)
		}
		if err := control.ListTenants(ctx, js, o.Names, scfg.Tenants...); err != nil {
			return nil, fmt.Errorf("open deployment: %w", err)
		}
		provisioned = &Provisioned{Streams: report}
	}
	d := &Deployment{js: js, names: o.Names, store: o.Store, provisioned: provisioned}
	d.store.Names = o.Names
	if err := d.readConsumerSettings(ctx, o.Names); err != nil {
		return nil, fmt.Errorf("open deployment: %w", err)
	}
	for _, bucket := range []string{o.Names.TasksBucket(), o.Names.WorkersBucket(), o.Names.ControlBucket()} {
		if _, err := js.KeyValue(ctx, bucket); err != nil {
			return nil, fmt.Errorf("open deployment: bucket %s (provision the deployment first): %w", bucket, err)
		}
	}
	return d, nil
}

// readConsumerSettings reads the shard consumers' ack wait and priority
// policy: from the consumer of (P0, shard 0), or on a pools deployment
// (no catch-all consumer) from the settings kept in the bucket's metadata.
func (d *Deployment) readConsumerSettings(ctx context.Context, names streams.Names) error {
	name := names.PriorityStream(0)
	stream, err := d.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("priority bucket %s (provision the deployment first): %w", name, err)
	}
	if sc := stream.CachedInfo().Config; streams.LayoutOf(sc).Routed() {
		cfg, err := streams.RoutedConfig(names, sc)
		if err != nil {
			return err
		}
		cc, err := streams.ConsumerConfig(cfg, 0, 0)
		if err != nil {
			return err
		}
		d.ackWait, d.policy = cc.AckWait, cc.PriorityPolicy
		return nil
	}
	consumerName := names.ConsumerName(0, 0)
	consumer, err := stream.Consumer(ctx, consumerName)
	if err != nil {
		return fmt.Errorf("shard consumer %s/%s (provision the deployment first): %w", name, consumerName, err)
	}
	info, err := consumer.Info(ctx)
	if err != nil {
		return fmt.Errorf("shard consumer %s/%s: %w", name, consumerName, err)
	}
	d.ackWait, d.policy = info.Config.AckWait, info.Config.PriorityPolicy
	return nil
}

// Provisioned returns what [Open] changed when it provisioned the
// deployment ([Options.Provision]); nil when it only verified it.
func (d *Deployment) Provisioned() *Provisioned { return d.provisioned }

// Names returns the deployment's names.
func (d *Deployment) Names() ax.Names { return d.names }

// AckWait returns the shard consumers' ack wait, as the server holds it.
func (d *Deployment) AckWait() time.Duration { return d.ackWait }

// PriorityPolicy returns the shard consumers' priority policy, as the
// server holds it.
func (d *Deployment) PriorityPolicy() jetstream.PriorityPolicy { return d.policy }

// Client returns a submit client of the deployment. cfg may be nil; its
// Names and Store are the deployment's (a cfg naming others is
// [ErrMismatch]).
func (d *Deployment) Client(ctx context.Context, cfg *ax.Config) (*ax.Client, error) {
	var c ax.Config
	if cfg != nil {
		c = *cfg
	}
	if err := d.agree("client", c.Names, c.Store, 0); err != nil {
		return nil, err
	}
	c.Names, c.Store = d.names, d.store
	return ax.NewClient(ctx, d.js, &c)
}

// Worker returns a worker of the deployment; cfg needs a Registry. Its
// Names, Store and AckWait are the deployment's (a cfg naming others is
// [ErrMismatch]).
func (d *Deployment) Worker(ctx context.Context, cfg *worker.Config) (*worker.Worker, error) {
	var c worker.Config
	if cfg != nil {
		c = *cfg
	}
	if err := d.agree("worker", c.Names, c.Store, c.AckWait); err != nil {
		return nil, err
	}
	c.Names, c.Store, c.AckWait = d.names, d.store, d.ackWait
	return worker.New(ctx, d.js, &c)
}

// Leader returns a leader contender of the deployment. cfg may be nil; its
// Names, Store and AckWait are the deployment's (a cfg naming others is
// [ErrMismatch]).
func (d *Deployment) Leader(ctx context.Context, cfg *scheduler.Config) (*scheduler.Leader, error) {
	var c scheduler.Config
	if cfg != nil {
		c = *cfg
	}
	if err := d.agree("leader", c.Names, c.Store, c.AckWait); err != nil {
		return nil, err
	}
	c.Names, c.Store, c.AckWait = d.names, d.store, d.ackWait
	return scheduler.New(ctx, d.js, &c)
}

// Admin returns the management API of the deployment (not started). cfg
// may be nil; its Names and Store are the deployment's (a cfg naming
// others is [ErrMismatch]).
func (d *Deployment) Admin(ctx context.Context, cfg *admin.Config) (*admin.Service, error) {
	var c admin.Config
	if cfg != nil {
		c = *cfg
	}
	if err := d.agree("admin", c.Names, c.Store, 0); err != nil {
		return nil, err
	}
	c.Names, c.Store = d.names, d.store
	return admin.New(ctx, d.js, &c)
}

// agree checks the values a config names (zero: none) against the
// deployment's.
func (d *Deployment) agree(part string, names streams.Names, store kv.StoreConfig, ackWait time.Duration) error {
	if names != (streams.Names{}) && names.Prefix() != d.names.Prefix() {
		return fmt.Errorf("%s: %w: prefix %q, the deployment's is %q", part, ErrMismatch, names.Prefix(), d.names.Prefix())
	}
	if ackWait != 0 && ackWait != d.ackWait {
		return fmt.Errorf("%s: %w: AckWait %s, the shard consumers' is %s", part, ErrMismatch, ackWait, d.ackWait)
	}
	store.Names = streams.Names{}
	want := d.store
	want.Names = streams.Names{}
	if store != (kv.StoreConfig{}) && store != want {
		return fmt.Errorf("%s: %w: record store %+v, the deployment's is %+v", part, ErrMismatch, store, d.store)
	}
	return nil
}
