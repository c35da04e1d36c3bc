package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// RejectsKey is the key of the rejected-submit report in AX_CONTROL.
const RejectsKey = "rejects"

// Limits of the rejected-submit watch.
const (
	maxRecentRejects = 20
	// maxRejectLogsPerSecond bounds the submit_rejected log lines; the
	// rest are counted and summed up once a second.
	maxRejectLogsPerSecond = 10
	rejectBuffer           = 4096
)

// RejectedSubmit is one message published under a submit root that no
// priority bucket accepts: it was not stored and no task exists for it.
type RejectedSubmit struct {
	Subject string `json:"subject"`
	// Reason is streams.RejectTokens, streams.RejectPriority or
	// streams.RejectUnbound; Detail says it in a sentence.
	Reason string    `json:"reason"`
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
}

// RejectsReport is what the leader's watch of mistyped submit subjects
// publishes in AX_CONTROL under [RejectsKey]; `ax stats`, `ax rejects` and
// the dashboard show it. It counts only the subjects of
// [streams.Names.RejectWatchSubjects] (listed in Watching); a sample
// (`ax rejects --sample`) sees every shape. Counts are totals since the
// first leader ran the watch (each leader carries them on).
type RejectsReport struct {
	Leader    string    `json:"leader"`
	UpdatedAt time.Time `json:"updated_at"`
	// Total counts the rejected messages seen; ByReason splits it.
	Total    uint64            `json:"total"`
	ByReason map[string]uint64 `json:"by_reason"`
	// Dropped counts the messages the watch could not keep up with (its
	// buffer was full): they were rejected but are not in Total.
	Dropped  uint64   `json:"dropped"`
	Watching []string `json:"watching"`
	// Recent lists the last rejected messages, newest last (at most 20).
	Recent []RejectedSubmit `json:"recent"`
}

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
	control jetstream.KeyValue
	report  RejectsReport
	changed bool
	logged  int    // log lines in the current second
	hushed  uint64 // rejections not logged in the current second
}

func newRejectWatch(l *Leader) *rejectWatch {
	return &rejectWatch{l: l, log: l.log.Named("rejects"),
		report: RejectsReport{ByReason: map[string]uint64{}, Watching: l.cfg.Names.RejectWatchSubjects()}}
}

func (w *rejectWatch) run(ctx context.Context) error {
	control, err := w.l.js.KeyValue(ctx, w.l.cfg.Names.ControlBucket())
	if err != nil {
		return fmt.Errorf("rejects: bind %s: %w", w.l.cfg.Names.ControlBucket(), err)
	}
	w.control = control
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
	r := RejectedSubmit{Subject: m.Subject, Reason: reason, Detail: detail, At: time.Now().UTC()}
	answerRejected(m, r)
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
	entry, err := w.control.Get(ctx, RejectsKey)
	if err != nil {
		return
	}
	var prev RejectsReport
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
	if _, err := w.control.Put(ctx, RejectsKey, data); err != nil {
		return fmt.Errorf("rejects: publish report: %w", err)
	}
	w.changed = false
	return nil
}

// answerRejected answers a request published on a rejected subject (a
// JetStream publish waiting for its ack) with a JetStream API error, which
// JetStream clients return as the publish error.
func answerRejected(m *nats.Msg, r RejectedSubmit) {
	if m.Reply == "" {
		return
	}
	var body struct {
		Error struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	body.Error.Code = 400
	body.Error.Description = fmt.Sprintf("ax: no priority bucket accepts subject %q: %s; the message was not stored (docs/WIRE.md)", r.Subject, r.Detail)
	data, _ := json.Marshal(&body)
	_ = m.Respond(data)
}

// rejectsReport reads the leader's rejected-submit report from AX_CONTROL,
// or nil when no leader wrote one yet.
func (a *Admin) rejectsReport(ctx context.Context) (*RejectsReport, error) {
	var r RejectsReport
	ok, err := a.controlReport(ctx, RejectsKey, &r)
	if !ok || err != nil {
		return nil, err
	}
	return &r, nil
}

// flush waits for the server to have the subscriptions of nc, at most 10s.
func flush(ctx context.Context, nc *nats.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return nc.FlushWithContext(ctx)
}
