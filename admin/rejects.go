package admin

import (
	"cmp"
	"context"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
)

// Bounds of a sample of the submit subjects (rejects.sample).
const (
	DefaultRejectsSample = 5 * time.Second
	MaxRejectsSample     = 20 * time.Second
	// maxSampledSubjects bounds the distinct rejected subjects a sample
	// keeps; the counts still cover every message.
	maxSampledSubjects = 1000
	// maxSampleReply bounds the rejected subjects a reply lists.
	maxSampleReply = 100
	sampleBuffer   = 1 << 16
)

// RejectsSampleRequest asks for a sample (rejects.sample).
type RejectsSampleRequest struct {
	// For is how long to sample, a Go duration from 100ms to 20s. Default 5s.
	For string `json:"for,omitempty"`
}

// RejectsSampleReply is what a sample of the submit subjects saw: every
// message published under a submit root while it ran, judged against the
// subjects the priority streams capture.
type RejectsSampleReply struct {
	For axtype.Duration `json:"for"`
	// Subscribed lists the subscriptions of the sample; Captured the
	// subjects of the priority streams.
	Subscribed []string `json:"subscribed"`
	Captured   []string `json:"captured"`
	// Seen counts the messages; Accepted those a bucket captures;
	// Rejected the others, split in ByReason.
	Seen     uint64            `json:"seen"`
	Accepted uint64            `json:"accepted"`
	Rejected uint64            `json:"rejected"`
	ByReason map[string]uint64 `json:"by_reason"`
	// Dropped counts the messages the sample could not keep up with.
	Dropped uint64 `json:"dropped"`
	// Subjects lists the rejected subjects, most frequent first (at most
	// 100, fewer when the reply had to fit the server's max_payload:
	// Truncated).
	Subjects  []SampledReject `json:"subjects"`
	Truncated bool            `json:"truncated,omitempty"`
	// Watch is the report of the leader's always-on watch, nil until a
	// leader ran it.
	Watch *control.RejectsReport `json:"watch,omitempty"`
}

// SampledReject is one rejected subject of a sample.
type SampledReject struct {
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
	Count   uint64 `json:"count"`
	// Watched: the leader's always-on watch sees this subject too (it is
	// one of the shapes it can watch for free).
	Watched bool `json:"watched"`
}

// rejectsSample subscribes to every subject under the submit roots for the
// requested time and reports the messages no priority stream captures.
// While it runs, every valid submit is delivered once more (to it): the
// cost the always-on watch avoids, paid only on demand; and a JetStream
// publish to a subject no stream captures waits for its timeout instead
// of getting "no responders" (the sample is a responder that stays silent).
func (a *Service) rejectsSample(ctx context.Context, data []byte) (any, error) {
	var req RejectsSampleRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	d := DefaultRejectsSample
	if req.For != "" {
		var err error
		if d, err = time.ParseDuration(req.For); err != nil || d < 100*time.Millisecond || d > MaxRejectsSample {
			return nil, badRequest(`"for" %q is not a Go duration from 100ms to %s, such as "5s"`, req.For, MaxRejectsSample)
		}
	}
	names := a.cfg.Names
	reply := &RejectsSampleReply{For: kv.Duration(d), ByReason: map[string]uint64{}, Subjects: []SampledReject{}}
	for p := range streams.Priorities {
		s, err := a.js.Stream(ctx, names.PriorityStream(p))
		if err != nil {
			return nil, fmt.Errorf("bind stream %s: %w", names.PriorityStream(p), err)
		}
		reply.Captured = append(reply.Captured, s.CachedInfo().Config.Subjects...)
	}
	for _, root := range names.SubmitRoots() {
		reply.Subscribed = append(reply.Subscribed, root, root+".>")
	}
	nc := a.js.Conn()
	msgs := make(chan *nats.Msg, sampleBuffer)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subject := range reply.Subscribed {
		s, err := nc.ChanSubscribe(subject, msgs)
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", subject, err)
		}
		subs = append(subs, s)
	}
	if err := flush(ctx, nc); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	watched := names.RejectWatchSubjects()
	seen := map[string]*SampledReject{}
	judge := func(m *nats.Msg) {
		reply.Seen++
		reason, detail := names.SubmitRejection(m.Subject)
		if reason == "" && !streams.MatchesAny(reply.Captured, m.Subject) {
			reason, detail = streams.RejectUnbound, "no priority stream captures it (they capture "+strings.Join(reply.Captured, ", ")+")"
		}
		if reason == "" {
			reply.Accepted++
			return
		}
		reply.Rejected++
		reply.ByReason[reason]++
		r := seen[m.Subject]
		if r == nil && len(seen) < maxSampledSubjects {
			r = &SampledReject{Subject: m.Subject, Reason: reason, Detail: detail, Watched: streams.MatchesAny(watched, m.Subject)}
			seen[m.Subject] = r
		}
		if r != nil {
			r.Count++
		}
		// The leader's watch answers the watched subjects. An unbound one is
		// left unanswered: it is a bucket refusing non-core tasks (or a
		// missing stream), whose publishers expect "no responders".
		if reason != streams.RejectUnbound && !streams.MatchesAny(watched, m.Subject) {
			streams.AnswerRejected(m, m.Subject, detail)
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
sample:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-msgs:
			judge(m)
		case <-timer.C:
			break sample
		}
	}
	for _, s := range subs {
		if n, err := s.Dropped(); err == nil {
			reply.Dropped += uint64(n)
		}
		_ = s.Unsubscribe()
	}
	subs = nil
	for len(msgs) > 0 { // delivered before the unsubscribe
		judge(<-msgs)
	}
	for _, r := range seen {
		reply.Subjects = append(reply.Subjects, *r)
	}
	slices.SortFunc(reply.Subjects, func(x, y SampledReject) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), strings.Compare(x.Subject, y.Subject))
	})
	subjects := reply.Subjects[:min(len(reply.Subjects), maxSampleReply)]
	var err error
	if reply.Watch, err = a.rejectsReport(ctx); err != nil {
		return nil, err
	}
	reply.Subjects = []SampledReject{}
	n, _ := fit(subjects, a.roomFor(reply))
	reply.Subjects, reply.Truncated = subjects[:n], n < len(subjects)
	return reply, nil
}

// SampleRejects samples the submit subjects and lists the messages no
// bucket stores (rejects.sample).
func (c *Client) SampleRejects(ctx context.Context, req RejectsSampleRequest) (*RejectsSampleReply, error) {
	return call[RejectsSampleReply](ctx, c, VerbRejectsSample, req)
}

// flush waits for the server to have the subscriptions of nc, at most 10s.
func flush(ctx context.Context, nc *nats.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return nc.FlushWithContext(ctx)
}
