package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"go.uber.org/zap"
)

// member is the worker's membership: a [kv.Lease] on AX_WORKERS/<id> whose
// data is its [kv.Member] record, renewed by compare-and-set while the
// worker serves, released when it stops and expiring with its TTL when it
// dies.
type member struct {
	lease   *kv.Lease
	record  kv.Member
	started time.Time
}

func (in *intake) newMember(ctx context.Context) (*member, error) {
	lease, err := kv.NewLease(ctx, in.js, &kv.LeaseConfig{
		Bucket: in.cfg.Names.WorkersBucket(), Key: in.cfg.ID, Holder: in.cfg.ID,
		TTL: in.cfg.MemberTTL, RenewEvery: in.cfg.MemberTTL / 4,
	})
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	in.lease.Store(lease)
	host, _ := os.Hostname()
	now := time.Now().UTC()
	return &member{lease: lease, started: now, record: kv.Member{
		ID: in.cfg.ID, Host: host, Concurrency: in.cfg.Concurrency, Version: in.cfg.Version,
		Shards: []int{}, Handles: slices.Sorted(slices.Values(in.cfg.Registry.Types())), StartedAt: now,
	}}, nil
}

// announce sets the member record the next renewal writes: the shards the
// worker owns, the tasks it runs now and the types it put back lately for
// want of a handler.
func (in *intake) announce(m *member) {
	m.record.Shards, m.record.Pools = in.ownedShards()
	if in.layout == streams.LayoutPools {
		m.record.Types = in.types()
	}
	m.record.InFlight = in.inFlight()
	m.record.Unhandled = in.unhandled.list(time.Now())
	data, err := json.Marshal(m.record)
	if err != nil {
		in.log.Error("member_encode", zap.Error(err))
		return
	}
	m.lease.SetData(data)
}

// inFlight counts the tasks whose handler runs now.
func (in *intake) inFlight() int {
	n := 0
	in.running.Range(func(_, _ any) bool { n++; return true })
	return n
}

// runMesh keeps the worker a member of the mesh until ctx ends: it joins,
// serves the shards the shared assignment gives it ([intake.serveMesh]), and
// when its membership is lost (it could not renew within the TTL, as in a
// network partition) it stops every consumer, cancels its running tasks
// with [ErrLeaseLost] and joins again.
func (in *intake) runMesh(ctx context.Context, m *member) {
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
		err := in.serveMesh(ctx, m)
		if err := in.serveNone(context.WithoutCancel(ctx)); err != nil {
			in.log.Warn("shards_stop_failed", zap.Error(err))
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, kv.ErrLeaseLost) {
			in.log.Warn("membership_lost", zap.Error(err))
			in.memberEpoch.Add(1) // before a new hold can make the lease valid again
			in.running.Range(func(_, e any) bool {
				e.(execution).cancel(ErrLeaseLost)
				return true
			})
		} else {
			in.log.Warn("membership_failed", zap.Error(err))
		}
		retry.Reset(in.cfg.MemberTTL / 4)
	}
}
