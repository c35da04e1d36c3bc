package cli

import (
	"fmt"
	"strings"

	"github.com/ax-mesh/ax/internal/embedded"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/spf13/cobra"
)

func addServer(root *cobra.Command, e *env) {
	var o embedded.Options
	var cluster embedded.ClusterOptions
	var routes string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one NATS server with JetStream (a node of a cluster with --routes)",
		Long: `ax server runs the same embedded NATS server as ax dev, without workers: one
node of a JetStream cluster when --cluster-listen and --routes are given. Use
ax provision --replicas 3 once the cluster is up.`,
		Example: `  ax server --name n1 --listen 127.0.0.1:4222 --data ./n1 \
    --cluster-listen 127.0.0.1:6222 --routes nats://127.0.0.1:6222,nats://127.0.0.1:6223,nats://127.0.0.1:6224`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.logger(true)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			if cluster.Listen != "" || routes != "" {
				if cluster.Listen == "" || routes == "" {
					return fmt.Errorf("--cluster-listen and --routes go together")
				}
				cluster.Routes = strings.Split(routes, ",")
				o.Cluster = &cluster
			}
			o.Logger = log
			srv, err := embedded.Start(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.errOut, "NATS server %s with JetStream on %s (data in %s)\nserving; Ctrl-C to stop\n", srv.Name(), srv.ClientURL(), o.DataDir)
			<-cmd.Context().Done()
			return srv.Stop(embedded.ShutdownGrace)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", "ax-node", "server name (unique in a cluster)")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:4222", "client address")
	f.StringVar(&o.DataDir, "data", "./ax-data", "JetStream data directory")
	f.StringVar(&o.Sync, "sync", "", `JetStream flush policy: "always" or an interval such as "1s" (default: the server's 2m)`)
	f.StringVar(&o.Monitor, "monitor", "", "serve the HTTP monitoring endpoints (/varz, /jsz) on this host:port (default: none)")
	f.Int32Var(&o.MaxPayload, "max-payload", 1<<20, "largest message the server accepts, in bytes")
	f.StringVar(&cluster.Name, "cluster-name", "ax", "cluster name, the same on every node")
	f.StringVar(&cluster.Listen, "cluster-listen", "", "route address of this node, host:port")
	f.StringVar(&routes, "routes", "", "route URLs of every node, comma separated")
	root.AddCommand(cmd)
}

func addProvision(root *cobra.Command, e *env) {
	var cfg streams.Config
	var layout layoutFlags
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or update ax's streams, consumers and buckets (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Layout, err = layout.layout(); err != nil {
				return err
			}
			nc, js, err := e.connect("ax provision", roleScheduler)
			if err != nil {
				return err
			}
			defer nc.Close()
			_, err = e.provision(cmd.Context(), js, &cfg)
			return err
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&cfg.Replicas, "replicas", 1, "replicas of every stream, consumer and bucket (3 in a cluster)")
	fs.Int64Var(&cfg.Capacity, "capacity", streams.DefaultCapacity, "capacity of each priority bucket, in tasks")
	fs.DurationVar(&cfg.AckWait, "ack-wait", streams.DefaultAckWait, "ack wait of the shard consumers")
	fs.BoolVar(&cfg.MemoryConsumers, "memory-consumers", false, "keep the shard consumers' state in the server's memory (about 30 % less CPU per task; lost when a single server restarts: provision again then; see docs/OPERATIONS.md)")
	layout.add(fs, "route by task type (worker pools): one consumer per type, priority and shard instead of a catch-all per shard; only on a new deployment",
		"fair shares between tenants: one consumer per tenant, priority and shard instead of a catch-all per shard, served in turn; only on a new deployment")
	fs.StringSliceVar(&cfg.Types, "types", nil, "with --pools, create these types' consumers now (for workers not allowed to create consumers)")
	fs.StringSliceVar(&cfg.Tenants, "tenants", nil, "with --fair, create these tenants' consumers now (the leader creates the others when it first sees them)")
	root.AddCommand(cmd)
}
