package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ClusterOptions shape a NATS cluster of `ax server` processes.
type ClusterOptions struct {
	Nodes    int    // default 3
	Sync     string // "always" or an interval; empty: the server default
	Replicas int    // replicas ax is provisioned with; default Nodes
}

// cluster is a JetStream cluster of `ax server` processes on 127.0.0.1.
type cluster struct {
	t      *testing.T
	names  []string
	args   [][]string
	nodes  []*process
	urls   []string
	js     jetstream.JetStream
	allURL string // every client URL, comma separated
}

func startCluster(t *testing.T, o ClusterOptions) *cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Replicas == 0 {
		o.Replicas = o.Nodes
	}
	c := &cluster{t: t}
	var routes []string
	routePorts := make([]int, o.Nodes)
	for i := range o.Nodes {
		routePorts[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]))
	}
	for i := range o.Nodes {
		name := fmt.Sprintf("n%d", i+1)
		port := freePort(t)
		args := []string{"server", "--name", name, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data", t.TempDir(),
			"--cluster-name", "axtest", "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", routePorts[i]), "--routes", strings.Join(routes, ",")}
		if o.Sync != "" {
			args = append(args, "--sync", o.Sync)
		}
		c.names = append(c.names, name)
		c.args = append(c.args, args)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", port))
		c.nodes = append(c.nodes, startAx(t, args...))
	}
	c.allURL = strings.Join(c.urls, ",")
	_, c.js = connect(t, c.allURL)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.js.AccountInfo(ctx)
		return err == nil
	}, 60*time.Second, 200*time.Millisecond, "the cluster elected no JetStream leader")
	// A replicated stream's creation waits for its peers to elect a
	// leader: on a loaded machine that can outlast ax provision's request
	// (seen: "create stream AX_P0: context deadline exceeded" right after
	// the meta leader answered). Provisioning is idempotent: try again.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := axOutput("provision", "--server", c.allURL, "--replicas", fmt.Sprint(o.Replicas), "--ack-wait", faultAckWait)
		assert.NoError(ct, err)
	}, 90*time.Second, time.Second, "ax provision never succeeded")
	return c
}

// node returns the index of the node named name.
func (c *cluster) node(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	c.t.Fatalf("no node %q", name)
	return -1
}

// streamLeader returns the name of the server leading stream.
func (c *cluster) streamLeader(stream string) string {
	var leader string
	require.Eventually(c.t, func() bool {
		s, err := c.js.Stream(context.Background(), stream)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		if err == nil && info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return leader != ""
	}, 30*time.Second, 100*time.Millisecond)
	return leader
}

// restart starts node i again with its data.
func (c *cluster) restart(i int) {
	c.nodes[i] = startAx(c.t, c.args[i]...)
}
