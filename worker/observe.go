package worker

import (
	"time"

	"github.com/ax-mesh/ax/internal/kv"
)

// Outcome is how an attempt settled, as an [Observer] hears it; its
// string is the metrics label.
type Outcome string

// Outcomes an [Observer] hears about.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeRetry     Outcome = "retry"
	OutcomeDead      Outcome = "dead"
	OutcomeCancelled Outcome = "cancelled"
)

// Observer hears about every settled attempt, e.g. to count it in metrics
// (the metrics package implements it). It must not block.
type Observer interface {
	TaskFinished(taskType, tenant string, priority int, outcome Outcome, runTime time.Duration)
}

// RepairObserver, if the configured [Observer] implements it, hears about
// each value ax did not write that a worker found in a key and repaired
// (bucket, and what was done: "rebuilt" for a task record rebuilt from its
// message). It must not block.
type RepairObserver interface {
	ForeignValueRepaired(bucket, action string)
}

// observe reports a settled attempt of rec to the configured observer.
func (rn *runner) observe(rec *kv.Record, outcome Outcome) {
	if rn.cfg.Observer == nil {
		return
	}
	var took time.Duration
	if rec.StartedAt != nil {
		took = time.Since(*rec.StartedAt)
	}
	rn.cfg.Observer.TaskFinished(rec.Type, rec.Tenant, rec.Priority, outcome, took)
}
