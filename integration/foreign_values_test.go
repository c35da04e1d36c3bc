package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// foreignMesh is the single-account deployment (docs/ax-permissions.conf)
// as processes: `ax provision`, two `ax scheduler` (s1, s2) and `ax worker`
// as worker-1, each as its user; a Go client as the scheduler (it writes
// records) and producer-acme's raw connection, which forges.
type foreignMesh struct {
	srv        *roleServer
	url        string
	client     *ax.Client
	store      *kv.Store
	js         jetstream.JetStream // as the scheduler
	acme       *nats.Conn
	worker     *process
	schedulers []*process
}

func startForeignMesh(t *testing.T, provision ...string) *foreignMesh {
	t.Helper()
	srv := startRoleServer(t, permissionsFile)
	m := &foreignMesh{srv: srv, url: srv.ClientURL()}
	mustAxAs(t, m.url, "scheduler", append([]string{"provision"}, provision...)...)
	for _, id := range []string{"s1", "s2"} {
		m.schedulers = append(m.schedulers, startAxAs(t, m.url, "scheduler", "scheduler", "--scheduler-id", id,
			"--lease-ttl", leaderTTL.String(), "--sweep-interval", "200ms", "--metrics-addr", "127.0.0.1:0"))
	}
	m.worker = m.startWorker(t)
	ctx := context.Background()
	js := jsOf(t, connectRole(t, srv, "scheduler"))
	m.js = js
	var err error
	m.client, err = ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	m.store, err = kv.NewStore(ctx, js, nil)
	require.NoError(t, err)
	m.acme = connectRole(t, srv, "producer-acme")
	require.Eventually(t, func() bool { return leaderOf(js) != "" }, 30*time.Second, 50*time.Millisecond, "no leader")
	return m
}

// startWorker starts `ax worker` as worker-1.
func (m *foreignMesh) startWorker(t *testing.T) *process {
	t.Helper()
	w := startAxAs(t, m.url, "worker-1", "worker", "--id", "worker-1", "--concurrency", "8", "--metrics-addr", "127.0.0.1:0")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	return w
}

// forge makes the server write its publish acknowledgement onto key of
// bucket, as producer-acme may: a JetStream publish to its own submit
// subject whose reply subject is the key's ({"stream":"AX_P2","seq":N}).
// It returns once a watch of the key saw the acknowledgement land (ax may
// replace it at once: the workers rewrite a shard table they cannot read).
//
// With dup, the publish is made twice with one Nats-Msg-Id: what lands
// last is the duplicate's acknowledgement ({…,"duplicate": true}).
func (m *foreignMesh) forge(t *testing.T, bucket, key string, dup bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kvb, err := m.js.KeyValue(ctx, bucket)
	require.NoError(t, err)
	w, err := kvb.Watch(ctx, key, jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	want, times := `"stream":"AX_P2"`, 1
	if dup {
		want, times = `"duplicate": true`, 2
	}
	id := "forge-" + nuid.Next()
	for range times {
		msg := nats.NewMsg("ax.submit.p2.acme.echo.forge")
		msg.Data = []byte("x")
		msg.Reply = kv.KeySubject(bucket, key)
		if dup {
			msg.Header.Set(jetstream.MsgIDHeader, id)
		}
		require.NoError(t, m.acme.PublishMsg(msg))
	}
	require.NoError(t, m.acme.Flush())
	for {
		select {
		case e := <-w.Updates():
			if e != nil && strings.Contains(string(e.Value()), want) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("the ack did not land on %s/%s", bucket, key)
		}
	}
}

// counted reports whether one of procs serves metrics with
// ax_foreign_values_total{action, bucket} at least 1.
func counted(procs []*process, bucket, action string) bool {
	url := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	line := fmt.Sprintf(`ax_foreign_values_total{action=%q,bucket=%q} `, action, bucket)
	for _, p := range procs {
		at := url.FindStringSubmatch(p.output())
		if at == nil {
			continue
		}
		res, err := http.Get(at[1])
		if err != nil {
			continue
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil && strings.Contains(string(body), line) && !strings.Contains(string(body), line+"0\n") {
			return true
		}
	}
	return false
}

// succeeds waits until every task of ids (default tenant) succeeded.
func (m *foreignMesh) succeeds(t *testing.T, within time.Duration, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			rec, _, err := m.store.Get(ctx, kv.Ref{Tenant: "default", ID: id})
			if assert.NoError(c, err) {
				assert.Equal(c, kv.StateSucceeded, rec.State)
			}
		}, within, 100*time.Millisecond, "task %s", id)
	}
}

// submitMany submits n echo tasks of distinct keys (so, of many shards).
func (m *foreignMesh) submitMany(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		_, err := m.client.Submit(context.Background(), ax.TaskSpec{Type: "echo", ID: id, Key: fmt.Sprintf("k%d", i), Payload: []byte("hi")})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// Under the single-account file a producer's reply subject writes the
// server's ack onto any key of the AX account (docs/SECURITY.md). With the
// real processes running, producer-acme forges each key a reply can land
// on, and the mesh recovers with no operator action: docs/SECURITY.md
// ("What a forged value does") has the table this test proves. Each case
// has a mesh of its own.
//
// At the parent commit: after the forged lease no scheduler was ever
// elected again and the delayed task stayed PENDING; a forged record made
// its task fail every claim ("claim_failed") and stay READY, its delayed
// release retried for ever; a forged member got shards no worker consumed
// and `ax workers` failed; a forged unique claim failed every unique
// submit of its key.
func TestForeignValuesDoNotStopTheMesh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("the leader lease", func(t *testing.T) {
		m := startForeignMesh(t)
		js := m.js
		_, err := m.client.Submit(ctx, ax.TaskSpec{Type: "echo", ID: "after-lease", Delay: 3 * time.Second})
		require.NoError(t, err)
		forged := time.Now()
		m.forge(t, "AX_LOCKS", "leader", false)
		require.Eventually(t, func() bool { l := leaderOf(js); return l == "s1" || l == "s2" },
			6*leaderTTL+10*time.Second, 50*time.Millisecond, "no scheduler took the lease back")
		t.Logf("a scheduler leads again %s after the forged lease (TTL %s)", time.Since(forged).Round(100*time.Millisecond), leaderTTL)
		require.Eventually(t, func() bool { return counted(m.schedulers, "AX_LOCKS", "taken_over") }, 10*time.Second, 100*time.Millisecond)
		m.succeeds(t, 30*time.Second, "after-lease")
	})

	t.Run("a delayed task's record", func(t *testing.T) {
		m := startForeignMesh(t)
		_, err := m.client.Submit(ctx, ax.TaskSpec{Type: "echo", ID: "delayed-forged", Delay: 3 * time.Second})
		require.NoError(t, err)
		m.forge(t, "AX_TASKS", "default.delayed-forged", false)
		m.succeeds(t, 30*time.Second, "delayed-forged")
		rec, _, err := m.store.Get(ctx, kv.Ref{Tenant: "default", ID: "delayed-forged"})
		require.NoError(t, err)
		require.Equal(t, "repair", rec.Trail[0].Action, "the trail says it was rebuilt")
		require.Contains(t, rec.Trail[0].Error, `"stream":"AX_P2"`)
	})

	t.Run("a waiting task's record", func(t *testing.T) {
		m := startForeignMesh(t)
		m.worker.signal(t, os.Interrupt)
		require.Eventually(t, m.worker.exited, 30*time.Second, 50*time.Millisecond)
		_, err := m.client.Submit(ctx, ax.TaskSpec{Type: "echo", ID: "ready-forged", Payload: []byte("result")})
		require.NoError(t, err)
		// A client waiting for the task's result waits through the forge
		// (before, it returned ErrForeignRecord).
		waited := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			result, err := m.client.Wait(wctx, "", "ready-forged")
			if err == nil && string(result) != "result" {
				err = fmt.Errorf("result %q", result)
			}
			waited <- err
		}()
		m.forge(t, "AX_TASKS", "default.ready-forged", true)
		m.worker = m.startWorker(t)
		m.succeeds(t, 30*time.Second, "ready-forged")
		require.True(t, counted([]*process{m.worker}, "AX_TASKS", "rebuilt"), "the worker counts the repair")
		select {
		case err := <-waited:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Wait did not return the result")
		}
		out := mustAxAs(t, m.url, "operator", "task", "trail", "ready-forged")
		require.Contains(t, out, "value ax did not write", "the operator sees the repair")
	})

	t.Run("the members", func(t *testing.T) {
		m := startForeignMesh(t)
		m.forge(t, "AX_WORKERS", "phantom", false)
		m.forge(t, "AX_WORKERS", "worker-1", true)
		require.Eventually(t, func() bool { return strings.Contains(m.worker.output(), "membership_lost") },
			30*time.Second, 50*time.Millisecond, "worker-1's renewal did not find its key overwritten")
		m.succeeds(t, 60*time.Second, m.submitMany(t, "after-members", 32)...)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, _, err := runAxAs(m.url, "operator", time.Minute, "workers")
			assert.NoError(c, err)
			assert.Contains(c, out, "worker-1")
			assert.NotContains(c, out, "phantom")
		}, 60*time.Second, 200*time.Millisecond)
	})

	t.Run("the control keys", func(t *testing.T) {
		m := startForeignMesh(t)
		for _, key := range []string{"shards", "pools", "pressure", "tenants", "reconciler", "rejects", "unserved-deadlines", "cron.nightly"} {
			m.forge(t, "AX_CONTROL", key, false)
		}
		_, err := m.client.Submit(ctx, ax.TaskSpec{Type: "echo", ID: "after-control-delayed", Delay: 2 * time.Second})
		require.NoError(t, err)
		m.succeeds(t, 60*time.Second, append(m.submitMany(t, "after-control", 32), "after-control-delayed")...)
		_, _, err = runAxAs(m.url, "operator", time.Minute, "stats")
		require.NoError(t, err)
	})

	t.Run("a cron job", func(t *testing.T) {
		m := startForeignMesh(t)
		_, err := m.client.AddCron(ctx, ax.CronJob{Name: "nightly", Spec: "@every 1s", Task: ax.TaskSpec{Type: "echo"}})
		require.NoError(t, err)
		waitCronFires(t, m.client, time.Second, 2)
		m.forge(t, "AX_CONTROL", "cron.nightly", false)
		waitCronFires(t, m.client, time.Second, 3)
	})

	t.Run("the tenants of a fair deployment", func(t *testing.T) {
		m := startForeignMesh(t, "--fair")
		submitAs := func(tenant, id string) {
			_, err := m.client.Submit(ctx, ax.TaskSpec{Type: "echo", Tenant: tenant, ID: id})
			require.NoError(t, err)
		}
		succeeded := func(tenant, id string) {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				rec, _, err := m.store.Get(ctx, kv.Ref{Tenant: tenant, ID: id})
				if assert.NoError(c, err) {
					assert.Equal(c, kv.StateSucceeded, rec.State)
				}
			}, 60*time.Second, 100*time.Millisecond, "task %s of %s", id, tenant)
		}
		submitAs("acme", "acme-before")
		submitAs("globex", "globex-before")
		succeeded("acme", "acme-before")
		succeeded("globex", "globex-before")
		m.forge(t, "AX_CONTROL", "tenants", false)
		// A tenant new after the forge, then a worker that starts after it.
		submitAs("initech", "initech-after")
		succeeded("initech", "initech-after")
		m.worker.signal(t, os.Interrupt)
		require.Eventually(t, m.worker.exited, 30*time.Second, 50*time.Millisecond)
		m.worker = m.startWorker(t)
		submitAs("globex", "globex-after")
		submitAs("acme", "acme-after")
		succeeded("globex", "globex-after")
		succeeded("acme", "acme-after")
	})

	t.Run("the limits", func(t *testing.T) {
		m := startForeignMesh(t)
		mustAxAs(t, m.url, "operator", "limit", "set", "sleep", "--concurrency", "1")
		board, err := m.js.KeyValue(ctx, "AX_CONTROL")
		require.NoError(t, err)
		good, err := board.Get(ctx, "limits")
		require.NoError(t, err)
		// Over AX_CONTROL.limits the ack read as "no limit, no pause": the
		// leader writes back the limits it read.
		m.forge(t, "AX_CONTROL", "limits", true)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			e, err := board.Get(ctx, "limits")
			if assert.NoError(c, err) {
				assert.JSONEq(c, string(good.Value()), string(e.Value()))
			}
		}, 30*time.Second, 50*time.Millisecond, "the leader did not write the limits back")
		require.Eventually(t, func() bool { return counted(m.schedulers, "AX_CONTROL", "restored") }, 10*time.Second, 100*time.Millisecond)
		// Over the limit's slots in AX_LIMITS the ack read as "no slot
		// held": the task running on the slot is put back, and no task
		// takes a slot for a member TTL, so the limit is never exceeded.
		var ids []string
		for i := range 4 {
			id := fmt.Sprintf("sleep-%d", i)
			_, err := m.client.Submit(ctx, ax.TaskSpec{Type: "sleep", ID: id, Key: fmt.Sprintf("s%d", i), Payload: []byte(`{"ms":1000}`)})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			rec, _, err := m.store.Get(ctx, kv.Ref{Tenant: "default", ID: ids[0]})
			if assert.NoError(c, err) {
				assert.Equal(c, kv.StateRunning, rec.State)
			}
		}, 30*time.Second, 20*time.Millisecond)
		m.forge(t, "AX_LIMITS", kv.SlotsKey("sleep"), false)
		m.succeeds(t, time.Minute, ids...)
		var starts []time.Time
		for _, id := range ids {
			rec, _, err := m.store.Get(ctx, kv.Ref{Tenant: "default", ID: id})
			require.NoError(t, err)
			starts = append(starts, *rec.StartedAt)
		}
		slices.SortFunc(starts, time.Time.Compare)
		for i := 1; i < len(starts); i++ {
			require.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 900*time.Millisecond,
				"two tasks of a limit of 1 started %s apart, each sleeping 1 s: %v", starts[i].Sub(starts[i-1]), starts)
		}
	})

	t.Run("a unique claim", func(t *testing.T) {
		m := startForeignMesh(t)
		spec := ax.TaskSpec{Type: "echo", Tenant: "acme", ID: "unique-after", Payload: []byte("u"),
			Unique: &ax.UniqueOpts{Key: "nightly", For: time.Hour}}
		claim := kv.ClaimKey("acme", ax.UniqueHash("echo", "nightly", []byte("u")))
		m.forge(t, "AX_UNIQUE", claim, false)
		info, err := m.client.Submit(ctx, spec)
		require.NoError(t, err)
		require.False(t, info.Duplicate)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			rec, _, err := m.store.Get(ctx, kv.Ref{Tenant: "acme", ID: "unique-after"})
			if assert.NoError(c, err) {
				assert.Equal(c, kv.StateSucceeded, rec.State)
			}
		}, 30*time.Second, 100*time.Millisecond)
	})
}
