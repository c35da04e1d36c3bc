// Package metrics exposes ax's Prometheus metrics from its own registry (no
// global state): task outcomes by type, tenant, priority and outcome (the
// types and tenants bounded: [Config.MaxLabelValues]), run
// times, retries, bucket depth and in-flight gauges read from JetStream at
// scrape time, the dead-letter count, and the leader and pressure gauges
// that the scheduler's leader loops set through [Metrics.SetLeader] and
// [Metrics.SetPressure], the reconciler's repairs ([Metrics.Repaired]) and
// the mistyped submits the leader saw ([Metrics.RejectedSubmit]), and the
// workflows by state, read from AX_WORKFLOWS and their tasks' records at
// scrape time.
package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config configures [New].
type Config struct {
	// JetStream, when set, adds the bucket depth, in-flight and dead-letter
	// gauges, read at each scrape. Nil: task metrics only.
	JetStream jetstream.JetStream
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// ScrapeTimeout bounds the JetStream reads of one scrape. Default 5s.
	ScrapeTimeout time.Duration
	// MaxLabelValues bounds the values of each label a producer chooses:
	// the task types and, apart, the tenants of the task metrics, and the
	// types of the unserved gauges. The busiest keep their own value, the
	// others are counted under [OtherLabel] ("_other"), so that a producer
	// submitting many distinct types or tenants cannot grow the series
	// without bound. Default 100 ([DefaultMaxLabelValues]); -1: no bound.
	MaxLabelValues int
}

// Metrics holds ax's collectors in a registry of its own. Its methods are
// safe for concurrent use.
type Metrics struct {
	mu      sync.Mutex  // serializes the task metrics with their label bounds
	types   *labelBound // (mu)
	tenants *labelBound // (mu)

	reg      *prometheus.Registry
	tasks    *prometheus.CounterVec
	retries  *prometheus.CounterVec
	runTime  *prometheus.HistogramVec
	leader   prometheus.Gauge
	pressure prometheus.Gauge
	repairs  *prometheus.CounterVec
	rejects  *prometheus.CounterVec
	held     *prometheus.CounterVec
	foreign  *prometheus.CounterVec
}

// New returns the metrics of one ax process.
func New(cfg *Config) *Metrics {
	if cfg == nil {
		cfg = &Config{}
	}
	names := cfg.Names
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_tasks_total",
			Help: "Task attempts settled, by type, tenant, priority and outcome (succeeded, retry, dead, cancelled)."},
			[]string{"type", "tenant", "priority", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_task_retries_total",
			Help: "Failed attempts scheduled again, by type, tenant and priority."},
			[]string{"type", "tenant", "priority"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_task_run_seconds",
			Help:    "Run time of task attempts, by type and priority.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"type", "priority"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_leader",
			Help: "1 while this process holds the scheduler leader lease, else 0."}),
		pressure: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_pressure_level",
			Help: "Backpressure level published by the leader: 0 none, 1 alert (60%), 2 refuse non-core (80%), 3 stop P3-P4 (95%)."}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_reconciler_repairs_total",
			Help: "Lost tasks the leader's reconciler repaired, by the state they were found in and the action (republished, rescheduled, dead)."},
			[]string{"state", "action"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_rejected_submits_total",
			Help: "Messages published under a submit root that no priority bucket stored, seen by the leader's watch, by reason (tokens, priority)."},
			[]string{"reason"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_tasks_held_back_total",
			Help: "Deliveries a worker held back, unstarted, because their type or tenant is paused or a concurrency or rate limit is reached, by type, tenant and reason (paused, limited, stepped_aside: limited, and moved to AX_DELAYED for want of room to wait on its worker)."},
			[]string{"type", "tenant", "reason"}),
		foreign: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_foreign_values_total",
			Help: "Values ax did not write found in its keys (a publish acknowledgement sent to a reply subject naming a key, say) and what was done, by bucket and action (rebuilt: a task record rebuilt from its message; taken_over: a lease taken over; ignored: skipped, blocking nothing; reported: left for the operator)."},
			[]string{"bucket", "action"}),
	}
	m.reg.MustRegister(m.tasks, m.retries, m.runTime, m.leader, m.pressure, m.repairs, m.rejects, m.held, m.foreign,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	maxValues := cmp.Or(cfg.MaxLabelValues, DefaultMaxLabelValues)
	m.types = newLabelBound(maxValues, func(v string) { m.dropSeries("type", v) })
	m.tenants = newLabelBound(maxValues, func(v string) { m.dropSeries("tenant", v) })
	if cfg.JetStream != nil {
		timeout := cfg.ScrapeTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		m.reg.MustRegister(newStreamCollector(cfg.JetStream, names, timeout), newUnservedCollector(cfg.JetStream, names, timeout, maxValues),
			newLimitsCollector(cfg.JetStream, names, timeout), newTenantsCollector(cfg.JetStream, names, timeout, maxValues),
			newWorkflowsCollector(cfg.JetStream, names, timeout))
	}
	return m
}

// dropSeries deletes the task series of a label value no longer kept on its
// own. m.mu must be held.
func (m *Metrics) dropSeries(label, value string) {
	match := prometheus.Labels{label: value}
	m.tasks.DeletePartialMatch(match)
	m.retries.DeletePartialMatch(match)
	m.held.DeletePartialMatch(match)
	if label == "type" {
		m.runTime.DeletePartialMatch(match)
	}
}

// Registry returns the registry, to add collectors or gather in tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Metrics is the worker's observer.
var _ worker.Observer = (*Metrics)(nil)

// TaskFinished records a settled attempt; it implements [worker.Observer].
// The outcome's string is the "outcome" label; the type and the tenant are
// bounded ([Config.MaxLabelValues]).
func (m *Metrics) TaskFinished(taskType, tenant string, priority int, outcome worker.Outcome, runTime time.Duration) {
	p := "p" + strconv.Itoa(priority)
	m.mu.Lock()
	defer m.mu.Unlock()
	taskType, tenant = m.types.value(taskType), m.tenants.value(tenant)
	m.tasks.WithLabelValues(taskType, tenant, p, string(outcome)).Inc()
	if outcome == worker.OutcomeRetry {
		m.retries.WithLabelValues(taskType, tenant, p).Inc()
	}
	m.runTime.WithLabelValues(taskType, p).Observe(runTime.Seconds())
}

// Metrics hears about held-back deliveries.
var _ worker.HoldObserver = (*Metrics)(nil)

// TaskHeldBack counts a delivery held back by a pause or a limit; it
// implements [worker.HoldObserver]. The type and the tenant are bounded as
// for [Metrics.TaskFinished].
func (m *Metrics) TaskHeldBack(taskType, tenant, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	taskType, tenant = m.types.value(taskType), m.tenants.value(tenant)
	m.held.WithLabelValues(taskType, tenant, reason).Inc()
}

// SetLeader is the hook of the leader loop: true while it holds the lease.
func (m *Metrics) SetLeader(leader bool) {
	if leader {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// SetPressure is the hook of the backpressure loop (0..3).
func (m *Metrics) SetPressure(level int) { m.pressure.Set(float64(level)) }

// Repaired is the hook of the leader's reconciler: one lost task found in
// state and acted on ("republished", "rescheduled" or "dead").
func (m *Metrics) Repaired(state, action string) { m.repairs.WithLabelValues(state, action).Inc() }

// ForeignValueRepaired counts a value ax did not write, found in bucket,
// and what was done with it (worker.RepairObserver, and the scheduler's
// hook).
func (m *Metrics) ForeignValueRepaired(bucket, action string) {
	m.foreign.WithLabelValues(bucket, action).Inc()
}

// RejectedSubmit is the hook of the leader's watch of mistyped submit
// subjects: one message no bucket stored, for reason "tokens" or "priority".
func (m *Metrics) RejectedSubmit(reason string) { m.rejects.WithLabelValues(reason).Inc() }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Serve serves /metrics on addr until ctx ends. It returns the listener's
// address once listening (addr may use port 0) through ready, if not nil.
func (m *Metrics) Serve(ctx context.Context, addr string, log *zap.Logger, ready func(net.Addr)) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready(l.Addr())
	}
	if log != nil {
		log.Info("metrics_serving", zap.String("addr", l.Addr().String()))
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("metrics: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}
