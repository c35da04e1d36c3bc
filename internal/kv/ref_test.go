package kv_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// A record key names the tenant and the id, for every tenant a subject
// token allows (a KV key allows fewer characters), and two tasks never
// share one.
func TestRecordKeyNamesTenantAndID(t *testing.T) {
	t.Parallel()
	tenants := []string{"acme", "globex", "a-b_c/d", "=acme", "café", "a:b", "a=b", "ACME", "x"}
	seen := map[string]kv.Ref{}
	for _, tenant := range tenants {
		for _, id := range []string{"order-42", "a=b/c_d"} {
			ref := kv.Ref{Tenant: tenant, ID: id}
			key := ref.Key()
			require.Regexp(t, `^[-/_=.a-zA-Z0-9]+$`, key, "a valid KV key")
			back, err := kv.ParseKey(key)
			require.NoError(t, err, key)
			require.Equal(t, ref, back)
			other, dup := seen[key]
			require.False(t, dup, "%v and %v share key %s", ref, other, key)
			seen[key] = ref
		}
	}
	require.Equal(t, "acme.order-42", kv.Ref{Tenant: "acme", ID: "order-42"}.Key())
	_, err := kv.ParseKey("order-42")
	require.ErrorIs(t, err, kv.ErrForeignKey)
}

// Two tenants' equal ids are two tasks: each has its own record, moves
// alone, and is found by the id with its tenant named.
func TestEqualIDsOfTwoTenantsAreTwoTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	acme, globex := kv.Ref{Tenant: "acme", ID: "same"}, kv.Ref{Tenant: "globex", ID: "same"}
	for _, ref := range []kv.Ref{acme, globex} {
		_, _, err := b.store.Create(ctx, &kv.Record{ID: ref.ID, Tenant: ref.Tenant, Type: "x", Key: "k", State: kv.StateReady}, kv.Actor{})
		require.NoError(t, err, "%v is a task of its own", ref)
	}
	_, _, err := b.store.Create(ctx, &kv.Record{ID: "same", Tenant: "acme", Type: "x", Key: "k", State: kv.StateReady}, kv.Actor{})
	require.ErrorIs(t, err, kv.ErrExists)

	_, _, err = b.store.Transition(ctx, acme, kv.StateReady, kv.StateCancelled, kv.Actor{}, nil)
	require.NoError(t, err)
	rec, _, err := b.store.Get(ctx, globex)
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, rec.State, "acme's cancel left globex's task")
	require.Equal(t, "globex", rec.Tenant)

	refs, err := b.store.Find(ctx, "same")
	require.NoError(t, err)
	require.Equal(t, []kv.Ref{acme, globex}, refs)
	refs, err = b.store.Find(ctx, "other")
	require.NoError(t, err)
	require.Empty(t, refs)

	// A deleted record is not found.
	_, rev, err := b.store.Get(ctx, globex)
	require.NoError(t, err)
	require.NoError(t, b.store.Delete(ctx, globex, rev))
	refs, err = b.store.Find(ctx, "same")
	require.NoError(t, err)
	require.Equal(t, []kv.Ref{acme}, refs)
}

// A key that holds another task's record (not one ax wrote there) is not
// read as the task, and a record under a key without a tenant is reported
// by a scan, not taken for a task.
func TestForeignRecordsAreNotTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	bucket := b.store.Bucket()
	_, err := bucket.Put(ctx, "globex.victim", []byte(`{"id":"victim","tenant":"acme","type":"x","state":"READY"}`))
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "globex.ack", []byte(`{"stream":"AX_P2","seq":7}`)) // a JetStream ack a reply subject pointed here
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "old-id", []byte(`{"id":"old-id","tenant":"acme","type":"x","state":"READY"}`))
	require.NoError(t, err)
	for _, ref := range []kv.Ref{{Tenant: "globex", ID: "victim"}, {Tenant: "globex", ID: "ack"}} {
		_, _, err := b.store.Get(ctx, ref)
		require.ErrorIs(t, err, kv.ErrForeignRecord, ref)
	}
	var bad []string
	require.NoError(t, b.store.Scan(ctx, func(rec *kv.Record, _ uint64) error {
		t.Errorf("scanned %+v as a task", rec)
		return nil
	}, func(e *kv.UnreadableError) { bad = append(bad, e.Key) }))
	require.ElementsMatch(t, []string{"globex.victim", "globex.ack", "old-id"}, bad)
}
