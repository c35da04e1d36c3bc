package cli

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax/metrics"
	"github.com/spf13/cobra"
)

func addScheduler(root *cobra.Command, e *env) {
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the management API (NATS micro service \"ax\" on ax.admin.>) and its metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, err := e.logger(false)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			nc, js, err := e.connect("ax scheduler")
			if err != nil {
				return err
			}
			defer nc.Close()
			names, err := e.names()
			if err != nil {
				return err
			}
			stopMetrics, err := e.startMetrics(ctx, metricsAddr, metrics.New(&metrics.Config{JetStream: js, Names: names}), log)
			if err != nil {
				return err
			}
			defer stopMetrics()
			admin, err := startAdmin(ctx, js, names, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.errOut, "management API on %s\n", names.AdminSubject(">"))
			<-ctx.Done()
			return admin.Stop(context.WithoutCancel(ctx))
		},
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	root.AddCommand(cmd)
}
