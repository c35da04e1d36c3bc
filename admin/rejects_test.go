package admin_test

import (
	"context"
	"errors"
	"github.com/ax-mesh/ax/internal/axtest"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// rejectsBundle is a leader whose rejected submits feed a served metrics
// endpoint and an observed log, with the management API.
type rejectsBundle struct {
	*adminBundle
	logs       *observer.ObservedLogs
	metricsURL string
}

func setupRejects(t *testing.T) *rejectsBundle {
	t.Helper()
	b := &rejectsBundle{adminBundle: setupAdmin(t)}
	m := metrics.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan net.Addr, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Serve(ctx, "127.0.0.1:0", nil, func(a net.Addr) { served <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	b.metricsURL = "http://" + (<-served).String() + "/metrics"
	core, logs := observer.New(zapcore.WarnLevel)
	b.logs = logs
	b.StartLeader(t, scheduler.Config{Logger: zap.New(core),
		OnReject: func(r control.RejectedSubmit) { m.RejectedSubmit(r.Reason) }}).WaitLeading(t)
	// The watch has subscribed once its first report is in AX_CONTROL.
	require.Eventually(t, func() bool { return b.rejects(t) != nil }, 10*time.Second, 20*time.Millisecond)
	return b
}

// rejects reads the watch's report through `ax stats` (the stats verb).
func (b *rejectsBundle) rejects(t *testing.T) *control.RejectsReport {
	var reply admin.StatsReply
	require.NoError(t, b.call(t, admin.VerbStats, admin.StatsRequest{}, &reply))
	return reply.Rejects
}

// scrape returns the metrics endpoint's body.
func (b *rejectsBundle) scrape(t *testing.T) string {
	t.Helper()
	return axtest.Scrape(t, b.metricsURL)
}

// A raw core publish to a mistyped subject (issue 17.9: "Published", and no
// trace) is logged, counted on the metrics endpoint and reported by stats;
// a valid publish is none of these.
func TestMistypedSubmitIsLoggedCountedAndReported(t *testing.T) {
	t.Parallel()
	b := setupRejects(t)
	ctx := context.Background()

	_, err := b.JS.Publish(ctx, "ax.submit.p2.acme.echo.k1", nil)
	require.NoError(t, err)
	require.NoError(t, b.NC.Publish("ax.submit.p3.acme.echo.k2", nil))
	bad := map[string]string{
		"ax.submit.p9.acme.echo.k1":  streams.RejectPriority,
		"ax.submit.P0.acme.echo.k1":  streams.RejectPriority,
		"ax.submit.p2.acme.echo":     streams.RejectTokens,
		"ax.submit.p2.acme.echo.a.b": streams.RejectTokens,
		"ax.core.p5.acme.echo.k1":    streams.RejectPriority,
	}
	for subject := range bad {
		require.NoError(t, b.NC.Publish(subject, []byte("payload")))
	}
	require.NoError(t, b.NC.Flush())

	require.Eventually(t, func() bool {
		r := b.rejects(t)
		return r.Total == uint64(len(bad))
	}, 10*time.Second, 50*time.Millisecond)
	r := b.rejects(t)
	require.Equal(t, map[string]uint64{streams.RejectPriority: 3, streams.RejectTokens: 2}, r.ByReason)
	require.Len(t, r.Recent, len(bad))
	for _, x := range r.Recent {
		require.Equal(t, bad[x.Subject], x.Reason, x.Subject)
	}

	logged := map[string]bool{}
	for _, e := range b.logs.FilterMessage("submit_rejected").All() {
		logged[e.ContextMap()["subject"].(string)] = true
	}
	require.Len(t, logged, len(bad))
	for subject := range bad {
		require.True(t, logged[subject], subject)
	}

	body := b.scrape(t)
	require.Contains(t, body, `ax_rejected_submits_total{reason="priority"} 3`)
	require.Contains(t, body, `ax_rejected_submits_total{reason="tokens"} 2`)

	// The valid submits were stored, and were not counted.
	for _, subject := range []string{"ax.submit.p2.acme.echo.k1", "ax.submit.p3.acme.echo.k2"} {
		require.False(t, logged[subject])
	}
	s, err := b.JS.Stream(ctx, "AX_P3")
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs)
}

// A JetStream publish to a mistyped subject the watch sees gets an error
// that names the mistake, not a bare "no responders".
func TestMistypedJetStreamPublishIsAnswered(t *testing.T) {
	t.Parallel()
	b := setupRejects(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.JS.Publish(ctx, "ax.submit.p9.acme.echo.k1", nil)
	require.ErrorContains(t, err, `no priority bucket accepts subject "ax.submit.p9.acme.echo.k1": priority token "p9" is not p0..p4`)
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 400, apiErr.Code)
}

// A sample sees the wrong priority tokens the watch cannot (they have the
// shape of a valid submit), says which ones the watch sees too, and answers
// a JetStream publish to them.
func TestRejectsSampleSeesEveryShape(t *testing.T) {
	t.Parallel()
	b := setupRejects(t)
	ctx := context.Background()
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, s := range []string{"ax.submit.px.acme.echo.k1", "ax.submit.p7.acme.echo.k1"} {
				_ = b.NC.Publish(s, nil)
			}
			_, _ = b.JS.Publish(ctx, "ax.submit.p1.acme.echo.k1", nil, jetstream.WithMsgID(nats.NewInbox()[7:]))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	sample, err := b.api.SampleRejects(ctx, admin.RejectsSampleRequest{For: "1s"}) // the typed method
	require.NoError(t, err)
	reply := *sample
	close(stop)
	<-published

	require.Positive(t, reply.Accepted)
	require.Equal(t, reply.Seen, reply.Accepted+reply.Rejected)
	bySubject := map[string]admin.SampledReject{}
	for _, r := range reply.Subjects {
		bySubject[r.Subject] = r
	}
	require.Len(t, bySubject, 2)
	px := bySubject["ax.submit.px.acme.echo.k1"]
	require.Equal(t, streams.RejectPriority, px.Reason)
	require.False(t, px.Watched, "px has the shape of a valid submit")
	require.Positive(t, px.Count)
	require.True(t, bySubject["ax.submit.p7.acme.echo.k1"].Watched)
	require.NotNil(t, reply.Watch)
	require.Contains(t, reply.Subscribed, "ax.submit.>")
	require.Contains(t, reply.Subscribed, "ax.core.>")

	requireCode(t, b.call(t, admin.VerbRejectsSample, admin.RejectsSampleRequest{For: "1m"}, &reply),
		admin.CodeBadRequest, "from 100ms to 20s")

	// While a sample runs, a JetStream publish to an unwatched wrong
	// priority is answered with the reason.
	sampled := make(chan error, 1)
	go func() {
		sampled <- b.call(t, admin.VerbRejectsSample, admin.RejectsSampleRequest{For: "2s"}, &reply)
	}()
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := b.JS.Publish(pctx, "ax.submit.high.acme.echo.k1", nil)
		return err != nil && strings.Contains(err.Error(), `priority token "high" is not p0..p4`)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, <-sampled)
}

// A subject of the right shape that no stream captures (as while a bucket
// refuses non-core tasks) is reported "unbound" by a sample and left
// unanswered: its publisher is not told it is mistyped. (No leader runs:
// it would give the bucket its subject back.)
func TestRejectsSampleUnbound(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, "AX_P4")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	names := streams.DefaultNames()
	cfg.Subjects = slices.DeleteFunc(cfg.Subjects, func(f string) bool { return f == names.SubmitFilter(4) })
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	publish := func() error { // the client retries "no responders" for 500ms
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := b.JS.Publish(pctx, "ax.submit.p4.acme.echo.k1", nil)
		return err
	}
	require.Eventually(t, func() bool { return errors.Is(publish(), jetstream.ErrNoStreamResponse) },
		10*time.Second, 10*time.Millisecond, "without a sample: no responders")

	sampled := make(chan error, 1)
	var reply admin.RejectsSampleReply
	go func() {
		sampled <- b.call(t, admin.VerbRejectsSample, admin.RejectsSampleRequest{For: "4s"}, &reply)
	}()
	// While the sample runs, the publish is neither answered nor told "no
	// responders": it waits for its timeout.
	require.Eventually(t, func() bool { return errors.Is(publish(), context.DeadlineExceeded) },
		4*time.Second, 10*time.Millisecond)
	require.NoError(t, <-sampled)
	require.Len(t, reply.Subjects, 1, "%+v", reply)
	require.Equal(t, streams.RejectUnbound, reply.Subjects[0].Reason)
	require.Equal(t, "ax.submit.p4.acme.echo.k1", reply.Subjects[0].Subject)
	require.ErrorIs(t, publish(), jetstream.ErrNoStreamResponse, "no responders again")
}
