package integration

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// bucketMsgs returns how many messages a stream holds, read as the
// scheduler.
func bucketCount(t *testing.T, rc *roleConn, name string) uint64 {
	t.Helper()
	s, err := rc.js.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// publishHeaders publishes with JetStream as rc and returns the server's
// answer: the ack, or its error.
func publishHeaders(rc *roleConn, subject, id string, headers map[string]string) (*jetstream.PubAck, error) {
	msg := nats.NewMsg(subject)
	msg.Data = []byte("probe")
	if id != "" {
		msg.Header.Set(streams.HeaderMsgID, id)
	}
	for k, v := range headers {
		msg.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rc.js.PublishMsg(ctx, msg)
}

// What the server would do for a producer's headers on its publish to a
// bucket (nats-server 2.15's processJetStreamMsg), ax's bucket
// configuration refuses: a roll-up would purge every tenant's tasks, a TTL
// or a schedule would drop or move them, a counter or a batch would change
// what is stored. Each is answered with an error that says nothing of
// another tenant, and nothing is stored or removed.
func TestProducerHeadersTheBucketsRefuse(t *testing.T) {
	t.Parallel()
	m := startIDMesh(t)
	require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "globex-waits", "globex-payload"))
	before := bucketCount(t, m.control, "AX_P2")
	at := "@at " + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		name    string
		headers map[string]string
	}{
		{"roll-up of the whole bucket", map[string]string{"Nats-Rollup": "all"}},
		{"roll-up of the subject", map[string]string{"Nats-Rollup": "sub"}},
		{"per-message TTL", map[string]string{"Nats-TTL": "1s"}},
		{"schedule into another tenant's subject", map[string]string{"Nats-Schedule": at, "Nats-Schedule-Target": "ax.submit.p2.globex.echo.k"}},
		{"schedule purge", map[string]string{"Nats-Schedule-Next": "purge", "Nats-Scheduler": "ax.p2.10.globex.echo.k"}},
		{"scheduler", map[string]string{"Nats-Scheduler": "ax.p2.10.globex.echo.k"}},
		{"counter", map[string]string{"Nats-Incr": "1"}},
		{"atomic batch", map[string]string{"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "1"}},
		{"sourced message", map[string]string{"Nats-Stream-Source": "AX_P1 1 ax.p2.10.globex.echo.k"}},
		{"another stream", map[string]string{"Nats-Expected-Stream": "AX_DLQ"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ack, err := publishHeaders(m.acme, "ax.submit.p2.acme.echo.k", "probe-"+strings.ReplaceAll(c.name, " ", "-"), c.headers)
			var apiErr *jetstream.APIError
			require.ErrorAs(t, err, &apiErr, "refused, not stored (ack %+v)", ack)
			require.NotContains(t, err.Error(), "globex")
			require.Equal(t, before, bucketCount(t, m.control, "AX_P2"), "nothing stored, nothing removed")
		})
	}
	rec, err := m.tenantTask("globex", "globex-waits")
	if err == nil { // no worker: globex's task has no record yet; its message waits
		require.Equal(t, kv.StateReady, rec.State)
	}
	require.Equal(t, before, bucketCount(t, m.control, "AX_P2"))
}

// What the server answers a producer's publish that ax's configuration
// cannot change, with the shipped file (one account): each is named in
// docs/SECURITY.md ("What the server answers a producer") with the
// deployment that closes it. This test pins the list: if a server release
// answers otherwise, it fails, and the document is to be read again.
func TestServerAnswersAProducerAsDocumented(t *testing.T) {
	t.Parallel()
	m := startIDMesh(t)
	ctx := context.Background()
	for i := range 3 {
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", fmt.Sprintf("globex-secret-%d", i), "globex-payload"))
	}
	t.Run("the ack's sequence counts every tenant's messages", func(t *testing.T) {
		ack, err := publishHeaders(m.acme, "ax.submit.p2.acme.echo.k", "acme-1", nil)
		require.NoError(t, err)
		require.Equal(t, uint64(4), ack.Sequence, "acme's first message, after globex's three")
	})
	t.Run("an expected last message id is answered with the bucket's last id", func(t *testing.T) {
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "globex-secret-last", "globex-payload"))
		_, err := publishHeaders(m.acme, "ax.submit.p2.acme.echo.k", "acme-2", map[string]string{"Nats-Expected-Last-Msg-Id": "guess"})
		require.ErrorContains(t, err, "globex-secret-last")
	})
	t.Run("an expected last sequence of any subject is answered with it", func(t *testing.T) {
		_, err := publishHeaders(m.acme, "ax.submit.p2.acme.echo.k", "acme-3", map[string]string{
			"Nats-Expected-Last-Subject-Sequence":         "0",
			"Nats-Expected-Last-Subject-Sequence-Subject": "ax.p2.*.globex.>"})
		require.ErrorContains(t, err, "wrong last sequence: 5")
	})
	t.Run("a plain id another tenant published within the window is a duplicate", func(t *testing.T) {
		require.False(t, publish(t, m.globex, "ax.submit.p2.globex.echo.k", "plain-1", "globex-payload"))
		ack, err := publishHeaders(m.acme, "ax.submit.p2.acme.echo.k", "plain-1", nil)
		require.NoError(t, err)
		require.True(t, ack.Duplicate, "within %s", streams.DefaultBucketDuplicates)
	})
	t.Run("the ack goes to any reply subject, records included", func(t *testing.T) {
		key := kv.Ref{Tenant: "globex", ID: "globex-secret-0"}.Key()
		msg := nats.NewMsg("ax.submit.p2.acme.echo.k")
		msg.Reply = "$KV.AX_TASKS." + key
		require.NoError(t, m.acme.nc.PublishMsg(msg))
		require.NoError(t, m.acme.nc.Flush())
		store, err := kv.NewStore(ctx, m.control.js, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, _, err := store.Get(ctx, kv.Ref{Tenant: "globex", ID: "globex-secret-0"})
			return errors.Is(err, kv.ErrForeignRecord)
		}, 10*time.Second, 20*time.Millisecond, "the server wrote the ack over the record; ax does not read it as the task")
		var reply admin.TaskReply
		err = callAdmin(m.operator, admin.VerbTaskGet, admin.TaskRequest{ID: "globex-secret-0", Tenant: "globex"}, &reply)
		require.ErrorIs(t, err, &admin.Error{Code: admin.CodeConflict})
		require.ErrorContains(t, err, "holds something ax did not write there")
	})
}

// With each tenant's producer in an account of its own
// (docs/ax-tenant-accounts.conf), a reply subject cannot point the server's
// ack at anything of ax: the service import replaces it. The same attack
// on the shipped single-account file writes over globex's record.
func TestTenantAccountsCloseTheReplyDoor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		file  string
		lands bool
	}{{permissionsFile, true}, {accountsFile, false}} {
		t.Run(c.file, func(t *testing.T) {
			srv := natstest.Start(t, natstest.Options{ConfigFile: c.file})
			control := connectAs(t, srv, "scheduler")
			natstest.Provision(t, control.js, nil)
			store, err := kv.NewStore(ctx, control.js, nil)
			require.NoError(t, err)
			victim := kv.Ref{Tenant: "globex", ID: "victim"}
			_, _, err = store.Create(ctx, &kv.Record{ID: victim.ID, Tenant: victim.Tenant, Type: "echo", Key: "k", State: kv.StatePending}, kv.Actor{})
			require.NoError(t, err)
			acme := connectAs(t, srv, "producer-acme")
			// Every key a reply could land on: a task record, the leader
			// lease, a member, each control key, a unique claim, the
			// limits' slots (docs/SECURITY.md, "What a forged value does").
			keys := map[string][]string{
				"AX_LOCKS":   {"leader"},
				"AX_WORKERS": {"worker-1"},
				"AX_CONTROL": {"shards", "pools", "pressure", "tenants", "reconciler", "rejects", "unserved-deadlines", "limits", "cron.nightly"},
				"AX_UNIQUE":  {"acme.claim"},
				"AX_LIMITS":  {"slots.echo"},
			}
			replies := []string{"$KV.AX_TASKS." + victim.Key(), "ax.submit.p2.globex.evil.k"}
			for bucket, list := range keys {
				for _, key := range list {
					replies = append(replies, kv.KeySubject(bucket, key))
				}
			}
			for _, reply := range replies {
				msg := nats.NewMsg("ax.submit.p2.acme.echo.k")
				msg.Reply = reply
				require.NoError(t, acme.nc.PublishMsg(msg))
			}
			ack, err := publishHeaders(acme, "ax.submit.p2.acme.echo.k", "acme-ok", nil)
			require.NoError(t, err, "the producer's own publish is answered")
			require.Equal(t, "AX_P2", ack.Stream)
			require.NoError(t, acme.nc.Flush())

			landed := func() bool {
				_, _, err := store.Get(ctx, victim)
				if errors.Is(err, kv.ErrForeignRecord) || bucketCount(t, control, "AX_P2") != uint64(len(replies)+1) { // the probes and acme-ok
					return true
				}
				for bucket, list := range keys {
					b, err := control.js.KeyValue(ctx, bucket)
					require.NoError(t, err)
					for _, key := range list {
						if _, err := b.Get(ctx, key); err == nil {
							return true
						}
					}
				}
				return false
			}
			if c.lands {
				require.Eventually(t, landed, 10*time.Second, 20*time.Millisecond)
				return
			}
			time.Sleep(time.Second) // the acks were sent at once
			require.False(t, landed(), "an ack landed in the AX account")
			rec, _, err := store.Get(ctx, victim)
			require.NoError(t, err)
			require.Equal(t, kv.StatePending, rec.State)
		})
	}
}

// docs/ax-tenant-accounts.conf is docs/ax-permissions.conf with the
// producers moved to accounts of their own: every other user, and every
// user's permissions, are the same.
func TestTenantAccountsFileFollowsTheShippedOne(t *testing.T) {
	t.Parallel()
	shipped, err := server.ProcessConfigFile(permissionsFile)
	require.NoError(t, err)
	accounts, err := server.ProcessConfigFile(accountsFile)
	require.NoError(t, err)
	users := func(o *server.Options) map[string]*server.User {
		out := map[string]*server.User{}
		for _, u := range o.Users {
			out[u.Username] = u
		}
		return out
	}
	a, b := users(shipped), users(accounts)
	require.Equal(t, len(a), len(b))
	for name, u := range a {
		v, ok := b[name]
		require.True(t, ok, "user %s", name)
		require.True(t, reflect.DeepEqual(u.Permissions, v.Permissions), "permissions of %s differ", name)
		want := "AX"
		if strings.HasPrefix(name, "producer-") {
			want = strings.ToUpper(strings.TrimPrefix(name, "producer-"))
		}
		require.Equal(t, want, v.Account.Name, "account of %s", name)
		require.Equal(t, "AX", u.Account.Name)
	}
}
