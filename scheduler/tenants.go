package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Tenant discovery on a fair deployment ([streams.LayoutFair]).
const (
	// tenantTick is how often the discovery handles the tenants it was
	// told of, checks its subscription for drops and retries what failed.
	tenantTick = 100 * time.Millisecond
	// tenantStoreChecks bounds how many ticks a tenant seen on a submit
	// is looked for in its bucket before it is forgotten (its submit was
	// refused, or it was a request that matched no bucket).
	tenantStoreChecks = 20
	// tenantPendingMax bounds the tenants told of and not handled yet
	// ([tenantNotes]), and those looked for in the buckets: a flood of
	// submits of distinct tenants (a service user may submit as any
	// tenant) costs bounded memory and bounded checks per tick; a tenant
	// that does not fit is found by the next scan.
	tenantPendingMax = 1024
	// tenantScanEvery is the least time between two scans of the buckets
	// made because a tenant was missed (a scan reads every subject the
	// buckets hold).
	tenantScanEvery = 10 * time.Second
	// tenantMissWait is how long after a miss its scan is made.
	tenantMissWait = time.Second
)

// tenantNotes collects, for the discovery, the tenants it does not know
// of the tasks that reach a bucket: those of the submits its subscription
// hears (noted from the subscription's own goroutine, so that a slow step
// of the discovery never makes the client drop submits) and those of the
// tasks the leader's own loops put in a bucket without a submit (the
// mover's release of a delayed task, whose submit went to AX_DELAYED), so
// that a tenant whose first task is delayed gets its consumers when it is
// released. At most [tenantPendingMax] are held; a tenant that does not
// fit is not lost: the discovery scans the buckets.
type tenantNotes struct {
	names streams.Names
	known atomic.Pointer[map[string]bool] // the tenants the discovery knows: not noted

	mu      sync.Mutex
	tenants map[string]uint8 // tenant -> the priorities (bits) it was seen at (mu)
	missed  bool             // a tenant did not fit (mu)
}

func newTenantNotes(names streams.Names) *tenantNotes {
	return &tenantNotes{names: names, tenants: map[string]uint8{}}
}

// note notes tenant, seen at priority p, unless the discovery knows it or
// no tenant can be added any more.
func (n *tenantNotes) note(tenant string, p int) {
	k := n.known.Load()
	if k == nil || len(*k) >= streams.MaxTenants || (*k)[tenant] {
		return // no discovery runs (not a fair deployment, or not leading), or nothing to do
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.tenants[tenant]; !ok && len(n.tenants) >= tenantPendingMax {
		n.missed = true
		return
	}
	n.tenants[tenant] |= 1 << p
}

// heard notes the tenant of a submit subject
// "<prefix>.<submit|core>.<priority>.<tenant>.<type>.<key>".
func (n *tenantNotes) heard(subject string) {
	if s, err := n.names.ParseSubmit(subject); err == nil {
		n.note(s.Tenant, s.Priority)
	}
}

// take returns the tenants noted since the last take, and whether one was
// missed.
func (n *tenantNotes) take() (map[string]uint8, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.tenants) == 0 && !n.missed {
		return nil, false
	}
	out, missed := n.tenants, n.missed
	n.tenants, n.missed = map[string]uint8{}, false
	return out, missed
}

// pendingTenant is a tenant the discovery looks for in the buckets.
type pendingTenant struct {
	priorities uint8 // the buckets to look in (bits)
	checks     int   // ticks it has been looked for
}

// tenantDiscovery is the leader loop of a fair deployment that gives each
// tenant its consumers. It subscribes (core NATS) to the submit subjects,
// so it hears each submit as the bucket does, and for a tenant it does not
// know it checks that the tenant has a task stored in a bucket (so that a
// submit the bucket refused creates nothing), creates the tenant's
// consumers ([streams.EnsureTenantConsumers]) and adds it to
// AX_CONTROL/tenants, which the workers watch. A tenant whose submits it
// did not hear (published while no leader ran, dropped by a slow
// subscription, or beyond [tenantPendingMax]) is found by a scan of the
// buckets' subjects, made when the loop starts, that is each time a leader
// is elected, and after a miss (at most every [tenantScanEvery]). On any
// other deployment the loop does nothing.
//
// Each submit costs the leader one delivery (the subscription). At most
// [streams.MaxTenants] tenants get consumers; the tasks of the others wait
// in their bucket, and the loop logs tenants_full.
type tenantDiscovery struct {
	l       *Leader
	log     *zap.Logger
	cfg     *streams.Config
	board   jetstream.KeyValue
	buckets [streams.Priorities]jetstream.Stream
	known   map[string]bool
	pending map[string]*pendingTenant
	full    bool // tenants_full was logged
}

func newTenantDiscovery(l *Leader) *tenantDiscovery {
	return &tenantDiscovery{l: l, log: l.log.Named("tenants"), known: map[string]bool{}, pending: map[string]*pendingTenant{}}
}

func (d *tenantDiscovery) run(ctx context.Context) error {
	names := d.l.cfg.Names
	for p := range streams.Priorities {
		stream, err := d.l.js.Stream(ctx, names.PriorityStream(p))
		if err != nil {
			return fmt.Errorf("tenants: %w", err)
		}
		d.buckets[p] = stream
	}
	first := d.buckets[0].CachedInfo().Config
	if streams.LayoutOf(first) != streams.LayoutFair {
		<-ctx.Done()
		return ctx.Err()
	}
	var err error
	if d.cfg, err = streams.RoutedConfig(names, first); err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	if d.board, err = control.Open(ctx, d.l.js, names); err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	have, _, err := control.ReadTenants(ctx, d.board)
	if errors.Is(err, control.ErrForeignValue) {
		err = d.rebuild(ctx, err)
	}
	if err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	for _, t := range have.Tenants {
		d.known[t] = true
	}
	notes := d.l.tenants
	d.publishKnown()
	defer notes.known.Store(nil) // the next term reads the list again
	// Subscribed before the scan: a tenant is heard or found.
	nc := d.l.js.Conn()
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subject := range []string{names.Prefix() + ".submit.*.*.*.*", names.Prefix() + ".core.*.*.*.*"} {
		s, err := nc.Subscribe(subject, func(m *nats.Msg) { notes.heard(m.Subject) })
		if err != nil {
			return fmt.Errorf("tenants: subscribe %s: %w", subject, err)
		}
		subs = append(subs, s)
	}
	// A scan is made at once (a tenant may have been missed while no
	// leader ran), and after a miss: tenantMissWait later, so that the
	// tenant missed is stored, and not sooner than tenantScanEvery after
	// the last scan made for a miss.
	scanAt, forMiss := time.Now(), false // when a scan is due (zero: none is), and why
	var lastMissScan time.Time
	dropped := make([]int, len(subs)) // per subscription, the drops seen so far
	tick := time.NewTicker(tenantTick)
	defer tick.Stop()
	checked := time.Now()
	for {
		if !scanAt.IsZero() && !time.Now().Before(scanAt) {
			if forMiss {
				lastMissScan = time.Now()
			}
			scanAt = time.Time{}
			if err := d.scan(ctx); err != nil {
				if ctx.Err() == nil {
					d.log.Warn("tenants_scan_failed", zap.Error(err))
				}
				scanAt = time.Now().Add(time.Second)
			} else {
				forMiss = false
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			missed := false
			for i, s := range subs {
				if n, err := s.Dropped(); err == nil && n > dropped[i] {
					dropped[i], missed = n, true
				}
			}
			noted, missedNote := notes.take()
			missed = missed || missedNote
			for tenant, prios := range noted {
				missed = !d.note(tenant, prios) || missed
			}
			if missed && scanAt.IsZero() {
				scanAt, forMiss = latest(time.Now().Add(tenantMissWait), lastMissScan.Add(tenantScanEvery)), true
			}
			d.settle(ctx)
			if time.Since(checked) >= tenantCheckEvery {
				checked = time.Now()
				d.check(ctx)
			}
		}
	}
}

// tenantCheckEvery is how often the leader reads the list of tenants back,
// to write it again if it holds a value ax did not write there.
const tenantCheckEvery = 2 * time.Second

// check reads the list of tenants and writes it again if it holds a value
// ax did not write there ([control.ErrForeignValue]).
func (d *tenantDiscovery) check(ctx context.Context) {
	_, _, err := control.ReadTenants(ctx, d.board)
	if errors.Is(err, control.ErrForeignValue) {
		err = d.rebuild(ctx, err)
	}
	if err != nil && ctx.Err() == nil {
		d.log.Warn("tenants_check_failed", zap.Error(err))
	}
}

// rebuild writes the list of tenants again over a value ax did not write
// there (found): the tenants this leader knows and those whose consumers
// exist (read from the consumers of the first shard of P0, which every
// tenant has). Without it, a worker that starts would serve none of them,
// and the leader, which knows them, would never list them again.
func (d *tenantDiscovery) rebuild(ctx context.Context, found error) error {
	if !d.l.held() {
		return errNotLeading
	}
	names := d.l.cfg.Names
	prefix, suffix := names.TenantFilter(0, 0, ""), ".>" // "ax.p0.0." + tenant + ".>"
	prefix = strings.TrimSuffix(prefix, suffix)
	lister := d.buckets[0].ListConsumers(ctx)
	for info := range lister.Info() {
		f := info.Config.FilterSubject
		if tenant, ok := strings.CutPrefix(f, prefix); ok && strings.HasSuffix(tenant, suffix) {
			if tenant = strings.TrimSuffix(tenant, suffix); streams.ValidateToken("tenant", tenant) == nil {
				d.known[tenant] = true
			}
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("list the tenants' consumers: %w", err)
	}
	if err := control.AddTenants(ctx, d.board, slices.Sorted(maps.Keys(d.known))...); err != nil {
		return err
	}
	d.publishKnown()
	d.log.Warn("tenants_foreign_value_replaced", zap.NamedError("found", found), zap.Strings("tenants", slices.Sorted(maps.Keys(d.known))))
	if d.l.cfg.OnForeignValue != nil {
		d.l.cfg.OnForeignValue(names.ControlBucket(), "rebuilt")
	}
	return nil
}

// publishKnown hands the known tenants to the notes (a copy: the notes
// read it from the subscription's goroutine).
func (d *tenantDiscovery) publishKnown() {
	known := maps.Clone(d.known)
	d.l.tenants.known.Store(&known)
}

// note makes tenant, seen at the priorities prios (bits), pending unless
// it is known; it reports false if there was no room.
func (d *tenantDiscovery) note(tenant string, prios uint8) bool {
	if d.known[tenant] {
		return true
	}
	if pt := d.pending[tenant]; pt != nil {
		pt.priorities |= prios
		return true
	}
	if len(d.pending) >= tenantPendingMax {
		return false
	}
	d.pending[tenant] = &pendingTenant{priorities: prios}
	return true
}

// settle gives consumers to each pending tenant that has a task stored.
func (d *tenantDiscovery) settle(ctx context.Context) {
	for _, tenant := range slices.Sorted(maps.Keys(d.pending)) {
		if ctx.Err() != nil {
			return
		}
		pt := d.pending[tenant]
		stored, err := d.stored(ctx, tenant, pt.priorities)
		if err != nil {
			d.log.Warn("tenant_check_failed", zap.String("tenant", tenant), zap.Error(err))
			continue
		}
		if !stored {
			if pt.checks++; pt.checks >= tenantStoreChecks {
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

// stored reports whether one of the buckets of prios (bits) holds a
// message of tenant.
func (d *tenantDiscovery) stored(ctx context.Context, tenant string, prios uint8) (bool, error) {
	for p := range streams.Priorities {
		if prios&(1<<p) == 0 {
			continue
		}
		_, err := d.buckets[p].GetLastMsgForSubject(ctx, d.l.cfg.Names.TenantStoredFilter(p, tenant))
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
	d.l.consumersMu.Lock() // not between a pause's listing and its end
	n, err := streams.EnsureTenantConsumers(ctx, d.l.js, d.cfg, tenant)
	d.l.consumersMu.Unlock()
	if err != nil {
		return err
	}
	// Every known tenant with it: a list a value ax did not write
	// replaced is then written whole again.
	if err := control.AddTenants(ctx, d.board, append(slices.Sorted(maps.Keys(d.known)), tenant)...); err != nil {
		return err
	}
	d.known[tenant] = true
	d.publishKnown()
	d.log.Info("tenant_added", zap.String("tenant", tenant), zap.Int("consumers_created", n))
	return nil
}

// scan finds the tenants of the messages every bucket holds, from the
// stream's subjects, and gives consumers to those it does not know.
func (d *tenantDiscovery) scan(ctx context.Context) error {
	found := map[string]bool{}
	for p, stream := range d.buckets {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(d.l.cfg.Names.StoredFilter(p)))
		if err != nil {
			return fmt.Errorf("subjects of %s: %w", d.l.cfg.Names.PriorityStream(p), err)
		}
		for subject := range info.State.Subjects {
			if s, err := d.l.cfg.Names.ParseStored(subject); err == nil && !d.known[s.Tenant] {
				found[s.Tenant] = true
			}
		}
	}
	var errs []error
	for _, tenant := range slices.Sorted(maps.Keys(found)) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := d.add(ctx, tenant); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
		}
	}
	return errors.Join(errs...)
}
