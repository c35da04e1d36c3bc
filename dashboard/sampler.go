package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
)

// Level is the pressure of one bucket.
type Level struct {
	Priority int     `json:"priority"`
	Fill     float64 `json:"fill"` // depth / capacity
	// Level is the name of the bucket's [ax.Level] at this fill:
	// "ok", "alert", "refuse" or "pause".
	Level string `json:"level"`
}

// Sample is one point of the charts.
type Sample struct {
	At            time.Time `json:"at"`
	Depth         []uint64  `json:"depth"` // per priority
	InFlight      []int     `json:"in_flight"`
	SucceededRate []float64 `json:"succeeded_per_s"`
	DeadRate      []float64 `json:"dead_per_s"`
}

// Overview is what the overview page shows: the last stats, the pressure
// of each bucket and the chart history.
type Overview struct {
	At           time.Time             `json:"at"`
	Version      string                `json:"version"`
	Prefix       string                `json:"prefix"`
	AllowActions bool                  `json:"allow_actions"`
	Stats        *admin.StatsReply     `json:"stats,omitempty"`
	Levels       []Level               `json:"levels"`
	Thresholds   ax.PressureThresholds `json:"thresholds"`
	// Leader is true when the thresholds and DispatchPaused come from the
	// leader's pressure report in the control bucket; false when the
	// levels are computed here from the default thresholds (docs/SCHEDULER.md).
	Leader         bool     `json:"leader"`
	DispatchPaused bool     `json:"dispatch_paused"`
	Error          string   `json:"error,omitempty"`
	Sample         *Sample  `json:"sample,omitempty"`
	History        []Sample `json:"history,omitempty"`
}

// leaderPressure is the part of the leader's "pressure" control entry the
// dashboard reads.
type leaderPressure struct {
	Paused bool `json:"paused"`
	// Buckets say which buckets the server refuses non-core tasks for: from
	// the refuse level until below the alert level, whatever their fill.
	Buckets []struct {
		Priority int  `json:"priority"`
		Refusing bool `json:"refusing"`
	} `json:"buckets"`
	Thresholds ax.PressureThresholds `json:"thresholds"`
	UpdatedAt  time.Time             `json:"updated_at"`
	ValidFor   int64                 `json:"valid_for"` // nanoseconds
}

// Run samples the stats until ctx ends. After each sample it waits
// Interval, or twice the time the sample took if that is longer: a stats
// call scans every task record, and the sampler must never keep the
// management API busy more than a third of the time.
func (d *Dashboard) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		start := time.Now()
		d.sample(ctx)
		timer.Reset(max(d.cfg.Interval, 2*time.Since(start)))
	}
}

// sample takes one overview, keeps it and wakes the live streams.
func (d *Dashboard) sample(ctx context.Context) *Overview {
	ov := d.takeOverview(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if ov.Sample != nil {
		d.history = append(d.history, *ov.Sample)
		if len(d.history) > d.cfg.History {
			d.history = d.history[len(d.history)-d.cfg.History:]
		}
	}
	d.latest = ov
	close(d.changed)
	d.changed = make(chan struct{})
	return ov
}

func (d *Dashboard) takeOverview(ctx context.Context) *Overview {
	ov := &Overview{At: time.Now().UTC(), Version: d.cfg.Version, Prefix: d.names.Prefix(),
		AllowActions: d.cfg.AllowActions, Thresholds: ax.DefaultPressureThresholds(), Levels: []Level{}}
	stats, err := call(ctx, d, func(ctx context.Context, api *admin.Client) (*admin.StatsReply, error) {
		return api.Stats(ctx, admin.StatsRequest{Window: d.cfg.RateWindow.String()})
	})
	if err != nil {
		ov.Error = fmt.Sprintf("stats: %s", err.Error())
		return ov
	}
	ov.Stats = stats
	refusing := map[int]bool{}
	if control, err := call(ctx, d, controlOf); err == nil {
		for _, e := range control.Entries {
			var p leaderPressure
			if e.Key != "pressure" || json.Unmarshal(e.Value, &p) != nil || p.Thresholds.Alert <= 0 {
				continue
			}
			ov.Leader, ov.Thresholds = true, p.Thresholds
			fresh := p.ValidFor <= 0 || time.Since(p.UpdatedAt) < time.Duration(p.ValidFor)
			ov.DispatchPaused = p.Paused && fresh
			for _, b := range p.Buckets {
				if b.Refusing && fresh {
					refusing[b.Priority] = true
				}
			}
		}
	}
	s := &Sample{At: ov.At}
	for _, b := range stats.Buckets {
		fill := 0.0
		if b.Capacity > 0 {
			fill = float64(b.Depth) / float64(b.Capacity)
		}
		level := ov.Thresholds.Level(fill)
		if refusing[b.Priority] {
			level = max(level, ax.LevelRefuse)
		}
		ov.Levels = append(ov.Levels, Level{Priority: b.Priority, Fill: fill, Level: level.String()})
		s.Depth = append(s.Depth, b.Depth)
		s.InFlight = append(s.InFlight, b.InFlight)
		s.SucceededRate = append(s.SucceededRate, b.SucceededRate)
		s.DeadRate = append(s.DeadRate, b.DeadRate)
	}
	ov.Sample = s
	return ov
}

// handleOverview answers the last overview with the chart history.
func (d *Dashboard) handleOverview(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	ov := d.latest
	d.mu.Unlock()
	if ov == nil { // Run has not sampled yet
		ov = d.sample(r.Context())
	}
	d.mu.Lock()
	out := *ov
	out.History = append([]Sample(nil), d.history...)
	d.mu.Unlock()
	writeJSON(w, http.StatusOK, &out)
}

// handleLive streams each new overview (with its sample, without the
// history) as a server-sent event until the client or the server goes.
func (d *Dashboard) handleLive(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("streaming unsupported"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	var last *Overview
	for {
		d.mu.Lock()
		ov, changed := d.latest, d.changed
		d.mu.Unlock()
		if ov != nil && ov != last {
			data, err := json.Marshal(ov)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: overview\ndata: %s\n\n", data); err != nil {
				return
			}
			flusher.Flush()
			last = ov
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}
