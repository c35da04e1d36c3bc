package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// pausedPriorities are the buckets whose dispatch may stop at the pause level.
var pausedPriorities = []int{3, 4}

// pauseFor is how long one pause of the P3/P4 consumers lasts; the leader
// extends it while pressure stays high, so a pause outlives no leader by long.
const pauseFor = time.Minute

// pressureLoop measures each bucket's depth (stored messages over capacity;
// a WorkQueue keeps in-flight messages, so they count), publishes the
// report in AX_CONTROL, alerts at the alert level and pauses P3/P4 dispatch
// at the pause level until the depth is below the resume level.
//
// A bucket is paused only for a bucket of higher priority (P3 for P0..P2;
// P4 for P0..P3), never for itself or a lower one: pausing the full bucket
// would stop it from draining below the resume level, and it would stay
// paused for good. So a full P3 pauses P4 only, and a full P4 pauses
// nothing; every bucket keeps draining.
type pressureLoop struct {
	l           *Leader
	log         *zap.Logger
	board       jetstream.KeyValue
	paused      map[int]bool        // per paused priority
	pausedUntil map[int]time.Time   // per paused priority
	alerted     map[string]ax.Level // last level logged per bucket
}

func newPressureLoop(l *Leader) *pressureLoop {
	return &pressureLoop{l: l, log: l.log.Named("pressure"), paused: map[int]bool{}, pausedUntil: map[int]time.Time{}, alerted: map[string]ax.Level{}}
}

func (p *pressureLoop) run(ctx context.Context) error {
	board, err := control.Open(ctx, p.l.js, p.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("pressure: bind %s: %w", p.l.cfg.Names.ControlBucket(), err)
	}
	p.board = board
	// A previous leader may have paused dispatch: carry its state over.
	if entry, err := board.Get(ctx, control.PressureKey); err == nil {
		var prev ax.Pressure
		if json.Unmarshal(entry.Value(), &prev) == nil {
			for _, prio := range prev.PausedPriorities {
				p.paused[prio] = true
			}
		}
	}
	tick := time.NewTicker(p.l.cfg.PressureInterval)
	defer tick.Stop()
	for {
		if err := p.measure(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("measure_failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			p.endRefusals(ctx)
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// endRefusals admits non-core tasks again on every bucket that refuses them
// when this leader stops while it still holds the lease (a scheduler that
// exits): the refusal is enforced by the leader's readings and must not
// outlive them, or a drained bucket would refuse every non-core submit
// until a scheduler ran again. A successor refuses again from the refuse
// level. A leader that lost its lease leaves the buckets to its successor
// (it may no longer write), and one that dies leaves them as they are.
func (p *pressureLoop) endRefusals(ctx context.Context) {
	if errors.Is(context.Cause(ctx), kv.ErrLeaseLost) || !p.l.held() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endRefusalsTimeout)
	defer cancel()
	names := p.l.cfg.Names
	for prio := range streams.Priorities {
		if !p.l.refusing[prio].Load() { // the last reading: nothing to lift
			continue
		}
		if !p.l.held() {
			return
		}
		// SetAdmission reads the stream itself and changes nothing if a
		// reading since has already seen the bucket admit.
		changed, err := streams.SetAdmission(ctx, p.l.js, names, prio, false)
		if err != nil {
			p.log.Warn("admission_failed", zap.String("stream", names.PriorityStream(prio)), zap.Bool("refuse", false), zap.Error(err))
			continue
		}
		p.l.refusing[prio].Store(false)
		if changed {
			p.log.Info("bucket_admits_all", zap.String("stream", names.PriorityStream(prio)), zap.String("reason", "leader stopped"))
		}
	}
}

// endRefusalsTimeout bounds the writes of [pressureLoop.endRefusals].
const endRefusalsTimeout = 5 * time.Second

// measure takes one reading and acts on it.
func (p *pressureLoop) measure(ctx context.Context) error {
	cfg := p.l.cfg
	th := cfg.Pressure
	report := ax.Pressure{Thresholds: th, Leader: p.l.ID(), ValidFor: max(10*cfg.PressureInterval, 5*time.Second)}
	depths := make([]float64, streams.Priorities)
	for prio := range streams.Priorities {
		name := cfg.Names.PriorityStream(prio)
		stream, err := p.l.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("pressure: %s: %w", name, err)
		}
		info := stream.CachedInfo()
		b := ax.BucketPressure{Stream: name, Priority: prio, Msgs: info.State.Msgs, Capacity: info.Config.MaxMsgs, MaxMsgSize: info.Config.MaxMsgSize}
		if b.Capacity > 0 {
			b.Depth = float64(b.Msgs) / float64(b.Capacity)
		}
		b.Level = th.Level(b.Depth)
		refusing, err := p.admit(ctx, prio, b, info.Config)
		if err != nil {
			return err
		}
		b.Refusing = refusing
		p.l.refusing[prio].Store(refusing)
		if refusing { // the level in effect: refusal lasts until below the alert level
			b.Level = max(b.Level, ax.LevelRefuse)
		}
		depths[prio] = b.Depth
		report.Buckets = append(report.Buckets, b)
	}
	delayed, err := p.l.js.Stream(ctx, cfg.Names.DelayedStream())
	if err != nil {
		return fmt.Errorf("pressure: %s: %w", cfg.Names.DelayedStream(), err)
	}
	report.Delayed = delayed.CachedInfo().State.Msgs
	var errs []error
	for _, prio := range pausedPriorities {
		// The fullest bucket of higher priority decides: never prio itself.
		above := slices.Max(depths[:prio])
		switch {
		case !p.paused[prio] && above >= th.Pause:
			if !p.l.held() {
				return errNotLeading
			}
			p.paused[prio] = true
			p.log.Warn("dispatch_paused", zap.Float64("depth", above), zap.Int("priority", prio))
		case p.paused[prio] && above < th.Resume:
			if !p.l.held() {
				return errNotLeading
			}
			p.paused[prio] = false
			errs = append(errs, p.resume(ctx, prio))
			p.log.Info("dispatch_resumed", zap.Float64("depth", above), zap.Int("priority", prio))
		}
		if p.paused[prio] && time.Until(p.pausedUntil[prio]) < pauseFor/2 {
			if !p.l.held() {
				return errNotLeading
			}
			errs = append(errs, p.pause(ctx, prio))
		}
		if p.paused[prio] {
			report.PausedPriorities = append(report.PausedPriorities, prio)
		}
	}
	report.Paused = len(report.PausedPriorities) > 0
	report.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(&report)
	if err != nil {
		return err
	}
	if !p.l.held() {
		return errNotLeading
	}
	if _, err := p.board.Put(ctx, control.PressureKey, data); err != nil {
		errs = append(errs, fmt.Errorf("pressure: publish report: %w", err))
	}
	p.alert(report, data)
	if cfg.OnPressure != nil {
		cfg.OnPressure(report)
	}
	return errors.Join(errs...)
}

// admit makes the server refuse non-core tasks on bucket prio from the
// refuse level on, and admit them again once the bucket is below the alert
// level (the gap keeps a bucket near the threshold from flapping), and
// returns whether the bucket refuses now. The stream's own subjects are the
// state: a new leader carries on where the last one stopped.
func (p *pressureLoop) admit(ctx context.Context, prio int, b ax.BucketPressure, cfg jetstream.StreamConfig) (bool, error) {
	names := p.l.cfg.Names
	refusing := names.Refusing(cfg)
	var refuse bool
	switch {
	case !refusing && b.Level >= ax.LevelRefuse:
		refuse = true
	case refusing && b.Depth < p.l.cfg.Pressure.Alert:
		refuse = false
	default:
		return refusing, nil
	}
	if !p.l.held() {
		return refusing, errNotLeading
	}
	if _, err := streams.SetAdmission(ctx, p.l.js, names, prio, refuse); err != nil {
		p.log.Warn("admission_failed", zap.String("stream", b.Stream), zap.Bool("refuse", refuse), zap.Error(err))
		// The update may have been applied all the same (a timeout, or a
		// leader stopping mid-request): until the next reading, take the
		// bucket as refusing, so that aging and the mover hold and a
		// stopping leader lifts the refusal (SetAdmission reads the stream
		// and changes nothing if it admits).
		return true, nil
	}
	fields := []zap.Field{zap.String("stream", b.Stream), zap.Float64("depth", b.Depth), zap.Uint64("msgs", b.Msgs), zap.Int64("capacity", b.Capacity)}
	if refuse {
		p.log.Warn("bucket_refuses_non_core", fields...)
	} else {
		p.log.Info("bucket_admits_all", fields...)
	}
	return refuse, nil
}

// alert logs a bucket whose level changed and publishes the report on
// ax.events.pressure while any bucket is at the alert level or above.
func (p *pressureLoop) alert(report ax.Pressure, data []byte) {
	firing := false
	for _, b := range report.Buckets {
		if b.Level >= ax.LevelAlert {
			firing = true
		}
		if p.alerted[b.Stream] == b.Level {
			continue
		}
		p.alerted[b.Stream] = b.Level
		fields := []zap.Field{zap.String("stream", b.Stream), zap.Float64("depth", b.Depth), zap.Uint64("msgs", b.Msgs), zap.Int64("capacity", b.Capacity), zap.Stringer("level", b.Level)}
		if b.Level >= ax.LevelAlert {
			p.log.Warn("bucket_pressure", fields...)
		} else {
			p.log.Info("bucket_pressure_cleared", fields...)
		}
	}
	if firing {
		if err := p.l.js.Conn().Publish(p.l.cfg.Names.EventSubject("pressure"), data); err != nil {
			p.log.Warn("pressure_event_failed", zap.Error(err))
		}
	}
}

// pause pauses the shard consumers of bucket prio for pauseFor.
func (p *pressureLoop) pause(ctx context.Context, prio int) error {
	p.l.consumersMu.Lock()
	defer p.l.consumersMu.Unlock()
	until := time.Now().Add(pauseFor)
	var errs []error
	p.eachConsumer(ctx, prio, &errs, func(stream, consumer string) {
		if _, err := p.l.js.PauseConsumer(ctx, stream, consumer, until); err != nil {
			errs = append(errs, fmt.Errorf("pause %s/%s: %w", stream, consumer, err))
		}
	})
	if len(errs) == 0 {
		p.pausedUntil[prio] = until
	}
	return errors.Join(errs...)
}

// resume resumes the shard consumers of bucket prio.
func (p *pressureLoop) resume(ctx context.Context, prio int) error {
	p.l.consumersMu.Lock()
	defer p.l.consumersMu.Unlock()
	var errs []error
	p.eachConsumer(ctx, prio, &errs, func(stream, consumer string) {
		if _, err := p.l.js.ResumeConsumer(ctx, stream, consumer); err != nil {
			errs = append(errs, fmt.Errorf("resume %s/%s: %w", stream, consumer, err))
		}
	})
	delete(p.pausedUntil, prio)
	return errors.Join(errs...)
}

// eachConsumer calls fn for each consumer of bucket prio
// ([streams.BucketConsumers]); a failed listing is added to errs.
func (p *pressureLoop) eachConsumer(ctx context.Context, prio int, errs *[]error, fn func(stream, consumer string)) {
	consumers, err := streams.BucketConsumers(ctx, p.l.js, p.l.cfg.Names, prio)
	if err != nil {
		*errs = append(*errs, err)
		return
	}
	for _, consumer := range consumers {
		fn(p.l.cfg.Names.PriorityStream(prio), consumer)
	}
}

// pressureWithDefaults fills the zero thresholds of p with
// [ax.DefaultPressureThresholds].
func pressureWithDefaults(p ax.PressureThresholds) ax.PressureThresholds {
	d := ax.DefaultPressureThresholds()
	p.Alert = cmp.Or(p.Alert, d.Alert)
	p.Refuse = cmp.Or(p.Refuse, d.Refuse)
	p.Pause = cmp.Or(p.Pause, d.Pause)
	p.Resume = cmp.Or(p.Resume, d.Resume)
	return p
}

// validatePressure refuses thresholds out of order.
func validatePressure(p ax.PressureThresholds) error {
	if !(0 < p.Resume && p.Resume < p.Pause && p.Alert <= p.Refuse && p.Refuse <= p.Pause && p.Pause <= 1) {
		return fmt.Errorf("pressure thresholds: want 0 < Resume < Pause, Alert <= Refuse <= Pause <= 1; have %+v", p)
	}
	return nil
}
