package cli

import (
	"context"
	"errors"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// openDeployment opens the deployment of --prefix on js with [deploy.Open]:
// every command that builds a submit client, a worker, the leader or the
// management API builds it from the returned handle, the path a Go service
// takes, so that the binary has no wiring of its own. What processes must
// agree on (names, the shard consumers' ack wait and priority policy, the
// record store) comes from the server; a flag that names another value
// (--ack-wait) is refused with [deploy.ErrMismatch].
func (e *env) openDeployment(ctx context.Context, js jetstream.JetStream, opts deploy.Options) (*deploy.Deployment, error) {
	names, err := e.names()
	if err != nil {
		return nil, err
	}
	opts.Names = names
	return deploy.Open(ctx, js, &opts)
}

// settled marks as [permanent] an error that waiting cannot cure: a flag
// that disagrees with the deployment.
func settled(err error) error {
	if errors.Is(err, deploy.ErrMismatch) || errors.Is(err, worker.ErrConfigMismatch) {
		return permanent{err}
	}
	return err
}

// submitClient returns the client of ax submit: the deployment's
// (deploy.Open), or with publishOnly a publish-only one made by
// ax.NewClient. A producer that may only publish (docs/ax-permissions.conf)
// cannot open the deployment, which reads the streams' and buckets' info:
// package deploy tells it to make its client this way.
func (e *env) submitClient(ctx context.Context, js jetstream.JetStream, publishOnly bool) (*ax.Client, error) {
	if publishOnly {
		names, err := e.names()
		if err != nil {
			return nil, err
		}
		return ax.NewClient(ctx, js, &ax.Config{Names: names, PublishOnly: true})
	}
	dep, err := e.openDeployment(ctx, js, deploy.Options{})
	if err != nil {
		return nil, err
	}
	return dep.Client(ctx, nil)
}
