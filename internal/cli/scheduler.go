package cli

import (
	"context"
	"fmt"

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
			d, err := e.startDaemon(ctx, "ax scheduler", metricsAddr)
			if err != nil {
				return err
			}
			defer d.close()
			admin, err := startAdmin(ctx, d.js, d.names, d.log)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.errOut, "management API on %s\n", d.names.AdminSubject(">"))
			<-ctx.Done()
			return admin.Stop(context.WithoutCancel(ctx))
		},
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	root.AddCommand(cmd)
}
