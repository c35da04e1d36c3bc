package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// The types waiting unserved are read from the stored subjects and the
// control-plane copies of a deployment with its own prefix, through the
// streams package's filters and parser: on a pools deployment every type
// no live member's pool has, on the default layout the types members put
// back. A served type is not listed; a type's depth counts all buckets.
func TestUnservedTypesOfADeployment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		layout  streams.Layout
		members []kv.Member
	}{
		{"pools", streams.LayoutPools, []kv.Member{{ID: "w1", Types: []string{"email"}}}},
		{"default layout", streams.LayoutShared, []kv.Member{{ID: "w1", Handles: []string{"email"}, Unhandled: []string{"resize"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, js := natstest.RunServer(t)
			ctx := context.Background()
			names, err := streams.NewNames("orders")
			require.NoError(t, err)
			_, err = streams.Provision(ctx, js, &streams.Config{Names: names, Layout: tc.layout})
			require.NoError(t, err)
			for _, subject := range []string{
				names.SubmitSubject(1, "acme", "email", "k1"),
				names.SubmitSubject(2, "acme", "resize", "k2"),
				names.CopySubject(3, "globex", "resize", "k3"),
			} {
				require.NoError(t, nc.Publish(subject, nil))
			}
			require.NoError(t, nc.Flush())
			var unserved []kv.Unserved
			require.Eventually(t, func() bool {
				unserved, err = kv.UnservedAmong(ctx, js, names, tc.members, tc.layout)
				require.NoError(t, err)
				return len(unserved) == 1 && unserved[0].Depth == 2
			}, 5*time.Second, 50*time.Millisecond, "unserved: %+v", unserved)
			require.Equal(t, "resize", unserved[0].Type)
			require.False(t, unserved[0].Oldest.IsZero(), "the store time of its oldest message")
		})
	}
}
