package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Limits of the rejected-submit watch.
const (
	maxRecentRejects = 20
	// maxRejectLogsPerSecond bounds the submit_rejected log lines; the
	// rest are counted and summed up once a second.
	maxRejectLogsPerSecond = 10
	rejectBuffer           = 4096
)

// rejectWatch is the leader loop that subscribes (core NATS) to the
// subjects under a submit root that no priority bucket accepts and that no
// valid submit can match ([streams.Names.RejectWatchSubjects]), so that a
// mistyped subject is seen (log line submit_rejected, the OnReject hook,
// the report) without one more delivery of any valid submit. A request
// (a JetStream publish waits for an ack) is answered with a JetStream API
// error naming the mistake, where it would otherwise get "no responders".
type rejectWatch struct {
	l       *Leader
	log     *zap.Logger
	board   jetstream.KeyValue
	report  control.RejectsReport
	changed bool
	logged  int    // log lines in the current second
	hushed  uint64 // rejections not logged in the current second
}

func newRejectWatch(l *Leader) *rejectWatch {
	return &rejectWatch{l: l, log: l.log.Named("rejects"),
		report: control.RejectsReport{ByReason: map[string]uint64{}, Watching: l.cfg.Names.RejectWatchSubjects()}}
}

func (w *rejectWatch) run(ctx context.Context) error {
	board, err := control.Open(ctx, w.l.js, w.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("rejects: bind %s: %w", w.l.cfg.Names.ControlBucket(), err)
	}
	w.board = board
	w.carryOver(ctx)
	nc := w.l.js.Conn()
	msgs := make(chan *nats.Msg, rejectBuffer)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subject := range w.report.Watching {
		s, err := nc.ChanSubscribe(subject, msgs)
		if err != nil {
			return fmt.Errorf("rejects: subscribe %s: %w", subject, err)
		}
		subs = append(subs, s)
	}
	if err := flush(ctx, nc); err != nil {
		return fmt.Errorf("rejects: subscribe: %w", err)
	}
	w.log.Info("rejects_watching", zap.Int("subjects", len(subs)))
	w.changed = true // the first report says the watch runs
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-msgs:
			w.reject(m)
		case <-tick.C:
			w.second(subs)
			if w.changed || time.Since(w.report.UpdatedAt) > 10*time.Second {
				if err := w.publish(ctx); err != nil && ctx.Err() == nil {
					w.log.Warn("rejects_publish_failed", zap.Error(err))
				}
			}
		}
	}
}

// reject counts, logs and answers one message of the watch.
func (w *rejectWatch) reject(m *nats.Msg) {
	reason, detail := w.l.cfg.Names.SubmitRejection(m.Subject)
	if reason == "" { // cannot happen: the watch subjects match no valid shape
		return
	}
	r := control.RejectedSubmit{Subject: m.Subject, Reason: reason, Detail: detail, At: time.Now().UTC()}
	streams.AnswerRejected(m, r.Subject, r.Detail)
	w.report.Total++
	w.report.ByReason[reason]++
	w.report.Recent = append(w.report.Recent, r)
	if n := len(w.report.Recent); n > maxRecentRejects {
		w.report.Recent = slices.Clone(w.report.Recent[n-maxRecentRejects:])
	}
	w.changed = true
	if w.logged < maxRejectLogsPerSecond {
		w.logged++
		w.log.Warn("submit_rejected", zap.String("subject", r.Subject), zap.String("reason", reason), zap.String("detail", detail))
	} else {
		w.hushed++
	}
	if w.l.cfg.OnReject != nil {
		w.l.cfg.OnReject(r)
	}
}

// second ends one second of logging, and counts the messages the
// subscriptions dropped.
func (w *rejectWatch) second(subs []*nats.Subscription) {
	if w.hushed > 0 {
		w.log.Warn("submit_rejected_not_logged", zap.Uint64("count", w.hushed))
	}
	w.logged, w.hushed = 0, 0
	var dropped uint64
	for _, s := range subs {
		if n, err := s.Dropped(); err == nil {
			dropped += uint64(n)
		}
	}
	if dropped != w.report.Dropped {
		w.report.Dropped, w.changed = dropped, true
	}
}

// carryOver starts from the totals of the previous leader's report.
func (w *rejectWatch) carryOver(ctx context.Context) {
	entry, err := w.board.Get(ctx, control.RejectsKey)
	if err != nil {
		return
	}
	var prev control.RejectsReport
	if json.Unmarshal(entry.Value(), &prev) != nil {
		return
	}
	w.report.Total, w.report.Recent = prev.Total, prev.Recent
	maps.Copy(w.report.ByReason, prev.ByReason)
}

// publish writes the report to AX_CONTROL.
func (w *rejectWatch) publish(ctx context.Context) error {
	w.report.Leader, w.report.UpdatedAt = w.l.ID(), time.Now().UTC()
	data, err := json.Marshal(&w.report)
	if err != nil {
		return err
	}
	if !w.l.held() {
		return errNotLeading
	}
	if _, err := w.board.Put(ctx, control.RejectsKey, data); err != nil {
		return fmt.Errorf("rejects: publish report: %w", err)
	}
	w.changed = false
	return nil
}

// flush waits for the server to have the subscriptions of nc, at most 10s.
func flush(ctx context.Context, nc *nats.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return nc.FlushWithContext(ctx)
}
