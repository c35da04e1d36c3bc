package ax_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// schemaOf returns a new value of the type the readers of an AX_CONTROL key
// decode it into: control's one definition of its schema.
func schemaOf(key string) any {
	if strings.HasPrefix(key, control.CronKeyPrefix) {
		return new(ax.CronJob)
	}
	return map[string]any{
		control.PressureKey:          new(control.Pressure),
		control.ShardTableKey:        new(control.ShardTable),
		control.PoolTableKey:         new(control.PoolTable),
		control.ReconcilerKey:        new(control.ReconcilerReport),
		control.RejectsKey:           new(control.RejectsReport),
		control.UnservedDeadlinesKey: new(control.UnservedDeadlines),
		control.LimitsKey:            new(control.Limits),
		control.TenantsKey:           new(control.Tenants),
	}[key]
}

// Every value the roles write to AX_CONTROL (the leader's reports, the
// workers' shard tables, the management API's limits and deadlines, the
// client's cron jobs) decodes into the schema its readers use with no field
// unknown to it, and encodes back to the same JSON: a writer and a reader
// that disagreed on a key's schema (a field one has and the other has not,
// a field of another type) fail here.
func TestControlValuesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	for _, layout := range []streams.Layout{streams.LayoutShared, streams.LayoutPools, streams.LayoutFair} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			if testing.Short() && layout != streams.LayoutFair {
				t.Skip("the fast tier decodes a fair deployment's keys (all but pools); the full suite every layout's")
			}
			cfg := &streams.Config{Layout: layout}
			if layout == streams.LayoutFair {
				cfg.Tenants = []string{"acme"}
			}
			b := axtest.Setup(t, axtest.Options{Server: natstest.Options{Fast: true}, Streams: cfg})
			ctx := context.Background()
			b.StartLeader(t, scheduler.Config{PressureInterval: 100 * time.Millisecond, SweepInterval: 100 * time.Millisecond}).WaitLeading(t)
			b.StartWorker(t, worker.Config{})
			api := b.StartAdmin(t, nil)
			_, err := api.SetLimit(ctx, "tenant:acme", control.Limit{Concurrency: 3, Weight: 2})
			require.NoError(t, err)
			_, err = api.SetUnservedDeadline(ctx, "report", time.Hour)
			require.NoError(t, err)
			_, err = b.Client.AddCron(ctx, ax.CronJob{Name: "nightly", Spec: "0 3 * * *", Task: ax.TaskSpec{Type: "report", Priority: ax.P1, Tenant: "acme"}})
			require.NoError(t, err)

			board, err := control.Open(ctx, b.JS, streams.Names{})
			require.NoError(t, err)
			want := []string{control.PressureKey, control.ReconcilerKey, control.LimitsKey, control.UnservedDeadlinesKey, control.CronKeyPrefix + "nightly"}
			switch layout {
			case streams.LayoutPools:
				want = append(want, control.PoolTableKey)
			case streams.LayoutFair:
				want = append(want, control.ShardTableKey, control.TenantsKey)
			default:
				want = append(want, control.ShardTableKey)
			}
			var keys []string
			require.Eventually(t, func() bool {
				lister, err := board.ListKeys(ctx)
				require.NoError(t, err)
				keys = keys[:0]
				for k := range lister.Keys() {
					keys = append(keys, k)
				}
				return subset(want, keys)
			}, 15*time.Second, 50*time.Millisecond, "AX_CONTROL holds %v, want at least %v", keys, want)

			for _, key := range keys {
				entry, err := board.Get(ctx, key)
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					continue
				}
				require.NoError(t, err, key)
				schema := schemaOf(key)
				require.NotNil(t, schema, "AX_CONTROL key %q has no schema in control", key)
				dec := json.NewDecoder(bytes.NewReader(entry.Value()))
				dec.DisallowUnknownFields()
				require.NoError(t, dec.Decode(schema), "%s: %s", key, entry.Value())
				again, err := json.Marshal(schema)
				require.NoError(t, err, key)
				require.JSONEq(t, string(entry.Value()), string(again), key)
			}
		})
	}
}

// subset reports whether every one of want is in have.
func subset(want, have []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
