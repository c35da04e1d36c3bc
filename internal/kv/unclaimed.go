package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-mesh/ax/internal/streams"
)

// Unclaimed finds the waiting messages of task id, of tenant ("" for any),
// that no worker has claimed yet and that have no record: a Go client
// writes no record for a task whose id and key it made itself, and the
// worker that claims it does (docs/decisions/record-at-claim.md). Such a
// task's stored subject ends in its id, "<prefix>.p<N>.<shard of id>.<tenant>.<type>.<id>",
// so one direct get per priority bucket finds it. Each returned record is
// the READY record the claim starts from, bound to its message, with the
// move the claim's record begins with (revision 0: none is stored).
func (s *Store) Unclaimed(ctx context.Context, id, tenant string) ([]*Record, error) {
	if tenant == "" {
		tenant = "*"
	}
	// The five buckets are read at once: a lookup costs one round trip.
	found := make([][]*Record, streams.Priorities)
	errs := make([]error, streams.Priorities)
	var wg sync.WaitGroup
	for p := range streams.Priorities {
		wg.Go(func() { found[p], errs[p] = s.unclaimedIn(ctx, p, id, tenant) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(found...), nil
}

// unclaimedIn is [Store.Unclaimed] in priority bucket p.
func (s *Store) unclaimedIn(ctx context.Context, p int, id, tenant string) ([]*Record, error) {
	names := s.cfg.Names
	stream, err := s.bucketStream(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("find task %s in its bucket: %w", id, err)
	}
	filter := names.StoredIDFilter(p, tenant, id)
	var out []*Record
	for seq := uint64(0); ; {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("find task %s in %s: %w", id, names.PriorityStream(p), err)
		}
		seq = msg.Sequence + 1
		stored, opts, err := names.ParseMessage(msg.Subject, msg.Header)
		if err != nil || opts.ID != id || stored.Copy {
			continue // another task keyed by this id, or not a producer's message
		}
		if _, _, err := s.Get(ctx, Ref{Tenant: stored.Tenant, ID: id}); !errors.Is(err, ErrNotFound) {
			continue // claimed meanwhile (or unreadable): the record speaks for it
		}
		rec := WaitingRecord(stored, opts, id, names.PriorityStream(p), msg.Sequence, msg.Time.UTC())
		rec.UpdatedAt = rec.CreatedAt
		rec.Trail = []Move{{Task: id, To: StateReady, At: rec.CreatedAt, Action: "publish"}}
		out = append(out, rec)
	}
}

// bucketStream returns the handle of priority stream p, bound once (its
// info read once: a direct get needs only the name and AllowDirect, which
// provisioning always sets on the buckets).
func (s *Store) bucketStream(ctx context.Context, p int) (jetstream.Stream, error) {
	if st := s.buckets[p].Load(); st != nil {
		return *st, nil
	}
	name := s.cfg.Names.PriorityStream(p)
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", name, err)
	}
	s.buckets[p].Store(&st)
	return st, nil
}

// WaitingRecord is the READY record of a task whose message (stream, seq,
// stored at published) no worker has claimed and whose submitter wrote no
// record: what a worker's claim starts from, what [Store.Unclaimed] shows
// until then, and what aging writes before it lifts such a task.
func WaitingRecord(stored streams.Stored, opts streams.Options, id, stream string, seq uint64, published time.Time) *Record {
	rec := &Record{
		ID: id, Type: stored.Type, Tenant: stored.Tenant, Key: stored.Key,
		Priority: stored.Priority, State: StateReady,
		MaxAttempts: opts.MaxAttempts, Timeout: Duration(opts.Timeout),
		CreatedAt: published,
	}
	rec.Bind(opts.Gen, stream, seq)
	if !opts.Deadline.IsZero() {
		t := opts.Deadline.UTC()
		rec.Deadline = &t
	}
	return rec
}

// Read returns the record of task ref and its revision or, for a task
// waiting in its bucket with its record still to be written at its claim,
// the READY record that claim starts from ([Store.Unclaimed]; revision 0,
// waiting true). A claim and a lift by aging write the record before the
// message leaves its bucket, so a task that left its bucket between the
// record's read and the buckets' has its record when read again: Read
// reads it a second time before it answers [ErrNotFound].
func (s *Store) Read(ctx context.Context, ref Ref) (rec *Record, rev uint64, waiting bool, err error) {
	rec, rev, err = s.Get(ctx, ref)
	if !errors.Is(err, ErrNotFound) {
		return rec, rev, false, err
	}
	found, err := s.Unclaimed(ctx, ref.ID, ref.Tenant)
	if err != nil {
		return nil, 0, false, err
	}
	if len(found) > 0 {
		return found[0], 0, true, nil
	}
	rec, rev, err = s.Get(ctx, ref)
	return rec, rev, false, err
}

// Locate returns the tasks of any tenant with id: those with a record
// ([Store.Find]) and, when none has one, those waiting unclaimed in their
// buckets ([Store.Unclaimed]). waiting is then, at the index of each ref,
// the READY record its claim starts from, as Unclaimed returns it (nil
// when the tasks have records): a caller that writes it looks in no bucket
// again. As [Store.Read], it looks for records a second time when the
// buckets hold none: a claim or a lift may have written one meanwhile.
func (s *Store) Locate(ctx context.Context, id string) (refs []Ref, waiting []*Record, err error) {
	refs, err = s.Find(ctx, id)
	if err != nil || len(refs) > 0 {
		return refs, nil, err
	}
	found, err := s.Unclaimed(ctx, id, "")
	if err != nil {
		return nil, nil, err
	}
	for _, rec := range found {
		if !slices.Contains(refs, rec.Ref()) {
			refs = append(refs, rec.Ref())
			waiting = append(waiting, rec)
		}
	}
	if len(refs) > 0 {
		return refs, waiting, nil
	}
	refs, err = s.Find(ctx, id)
	return refs, nil, err
}
