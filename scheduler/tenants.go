package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Tenant discovery on a fair deployment ([streams.Config.Fair]).
const (
	// tenantBuffer is how many submits the discovery's subscription
	// holds before the client drops some (a drop triggers a scan).
	tenantBuffer = 8192
	// tenantTick is how often the discovery handles the tenants it saw,
	// checks its subscription for drops and retries what failed.
	tenantTick = 100 * time.Millisecond
	// tenantStoreChecks bounds how many ticks a tenant seen on a submit
	// is looked for in its bucket before it is forgotten (its submit was
	// refused, or it was a request that matched no bucket).
	tenantStoreChecks = 20
	// tenantNoteBuffer is how many tenants the leader's own loops may note
	// ([tenantNotes]) before the discovery takes them (more trigger a scan).
	tenantNoteBuffer = 8192
)

// tenantNotes carries to the discovery the tenants of the tasks the
// leader's own loops put in a bucket without a submit: the mover's release
// of a delayed task (whose submit went to AX_DELAYED, which the discovery
// does not hear), so that a tenant whose first task is delayed gets its
// consumers when the task is released. A note that finds the buffer full
// is not lost: the discovery scans the buckets instead.
type tenantNotes struct {
	ch     chan string
	missed atomic.Bool
}

func newTenantNotes() *tenantNotes { return &tenantNotes{ch: make(chan string, tenantNoteBuffer)} }

// note hands tenant to the discovery without waiting.
func (n *tenantNotes) note(tenant string) {
	select {
	case n.ch <- tenant:
	default:
		n.missed.Store(true)
	}
}

// tenantDiscovery is the leader loop of a fair deployment that gives each
// tenant its consumers. It subscribes (core NATS) to the submit subjects,
// so it hears each submit as the bucket does, and for a tenant it does not
// know it checks that the tenant has a task stored in a bucket (so that a
// submit the bucket refused creates nothing), creates the tenant's
// consumers ([streams.EnsureTenantConsumers]) and adds it to
// AX_CONTROL/tenants, which the workers watch. A tenant whose submits it
// did not hear (published while no leader ran, or dropped by a slow
// subscription) is found by a scan of the buckets' subjects, made when
// the loop starts, that is each time a leader is elected, and after a
// drop. On any other deployment the loop does nothing.
//
// Each submit costs the leader one delivery (the subscription). At most
// [streams.MaxTenants] tenants get consumers; the tasks of the others wait
// in their bucket, and the loop logs tenants_full.
type tenantDiscovery struct {
	l       *Leader
	log     *zap.Logger
	cfg     *streams.Config
	board   jetstream.KeyValue
	known   map[string]bool
	pending map[string]int // tenant -> ticks it has been looked for in the buckets
	full    bool           // tenants_full was logged
}

func newTenantDiscovery(l *Leader) *tenantDiscovery {
	return &tenantDiscovery{l: l, log: l.log.Named("tenants"), known: map[string]bool{}, pending: map[string]int{}}
}

func (d *tenantDiscovery) run(ctx context.Context) error {
	names := d.l.cfg.Names
	first, err := d.l.js.Stream(ctx, names.PriorityStream(0))
	if err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	if !streams.UsesTenants(first.CachedInfo().Config) {
		<-ctx.Done()
		return ctx.Err()
	}
	if d.cfg, err = streams.RoutedConfig(names, first.CachedInfo().Config); err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	if d.board, err = control.Open(ctx, d.l.js, names); err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	have, _, err := control.ReadTenants(ctx, d.board)
	if err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	for _, t := range have.Tenants {
		d.known[t] = true
	}
	// Subscribed before the scan: a tenant is heard or found.
	nc := d.l.js.Conn()
	msgs := make(chan *nats.Msg, tenantBuffer)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subject := range []string{names.Prefix() + ".submit.*.*.*.*", names.Prefix() + ".core.*.*.*.*"} {
		s, err := nc.ChanSubscribe(subject, msgs)
		if err != nil {
			return fmt.Errorf("tenants: subscribe %s: %w", subject, err)
		}
		subs = append(subs, s)
	}
	scan := true
	dropped := make([]int, len(subs)) // per subscription, the drops seen so far
	tick := time.NewTicker(tenantTick)
	defer tick.Stop()
	for {
		if scan {
			if err := d.scan(ctx); err != nil {
				d.log.Warn("tenants_scan_failed", zap.Error(err))
			} else {
				scan = false
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-msgs:
			d.heard(m.Subject)
		case tenant := <-d.l.tenants.ch:
			d.note(tenant)
		case <-tick.C:
			if d.l.tenants.missed.Swap(false) {
				scan = true
			}
			for i, s := range subs {
				if n, err := s.Dropped(); err == nil && n > dropped[i] {
					dropped[i], scan = n, true
				}
			}
			d.settle(ctx)
		}
	}
}

// heard notes the tenant of a submit subject "<prefix>.<submit|core>.<priority>.<tenant>.<type>.<key>".
func (d *tenantDiscovery) heard(subject string) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != 6 {
		return
	}
	if _, err := streams.ParsePriority(tokens[2]); err != nil {
		return
	}
	d.note(tokens[3])
}

// note makes tenant pending unless it is known.
func (d *tenantDiscovery) note(tenant string) {
	if d.known[tenant] || streams.ValidateToken("tenant", tenant) != nil {
		return
	}
	if _, ok := d.pending[tenant]; !ok {
		d.pending[tenant] = 0
	}
}

// settle gives consumers to each pending tenant that has a task stored.
func (d *tenantDiscovery) settle(ctx context.Context) {
	for _, tenant := range slices.Sorted(maps.Keys(d.pending)) {
		stored, err := d.stored(ctx, tenant)
		if err != nil {
			d.log.Warn("tenant_check_failed", zap.String("tenant", tenant), zap.Error(err))
			continue
		}
		if !stored {
			if d.pending[tenant]++; d.pending[tenant] >= tenantStoreChecks {
				delete(d.pending, tenant)
			}
			continue
		}
		if err := d.add(ctx, tenant); err != nil {
			d.log.Warn("tenant_consumers_failed", zap.String("tenant", tenant), zap.Error(err))
			continue
		}
		delete(d.pending, tenant)
	}
}

// stored reports whether a bucket holds a message of tenant.
func (d *tenantDiscovery) stored(ctx context.Context, tenant string) (bool, error) {
	for p := range streams.Priorities {
		stream, err := d.l.js.Stream(ctx, d.l.cfg.Names.PriorityStream(p))
		if err != nil {
			return false, err
		}
		_, err = stream.GetLastMsgForSubject(ctx, d.l.cfg.Names.TenantStoredFilter(p, tenant))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, err
		}
	}
	return false, nil
}

// add creates tenant's consumers and lists it for the workers.
func (d *tenantDiscovery) add(ctx context.Context, tenant string) error {
	if len(d.known) >= streams.MaxTenants {
		if !d.full {
			d.full = true
			d.log.Error("tenants_full", zap.Int("tenants", len(d.known)), zap.String("tenant", tenant))
		}
		return nil
	}
	if !d.l.held() {
		return errNotLeading
	}
	n, err := streams.EnsureTenantConsumers(ctx, d.l.js, d.cfg, tenant)
	if err != nil {
		return err
	}
	if err := control.AddTenants(ctx, d.board, tenant); err != nil {
		return err
	}
	d.known[tenant] = true
	d.log.Info("tenant_added", zap.String("tenant", tenant), zap.Int("consumers_created", n))
	return nil
}

// scan finds the tenants of the messages every bucket holds, from the
// stream's subjects, and gives consumers to those it does not know.
func (d *tenantDiscovery) scan(ctx context.Context) error {
	found := map[string]bool{}
	for p := range streams.Priorities {
		stream, err := d.l.js.Stream(ctx, d.l.cfg.Names.PriorityStream(p))
		if err != nil {
			return err
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(d.l.cfg.Names.StoredFilter(p)))
		if err != nil {
			return fmt.Errorf("subjects of %s: %w", d.l.cfg.Names.PriorityStream(p), err)
		}
		for subject := range info.State.Subjects {
			if t := d.l.cfg.Names.TenantOfStored(subject); t != "" && !d.known[t] {
				found[t] = true
			}
		}
	}
	var errs []error
	for _, tenant := range slices.Sorted(maps.Keys(found)) {
		if err := d.add(ctx, tenant); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
		}
	}
	return errors.Join(errs...)
}
