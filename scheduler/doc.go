// Package scheduler runs ax's control loops (the design's scheduler; `ax
// scheduler` runs it) in the one process that holds the leader lease ([Leader], elected through [Elector]): the release of due
// delayed tasks, cron, aging, backpressure, the reconciler of lost tasks and
// the watch of mistyped submit subjects.
//
// Safety: the loops run only under the lease, and every change they make is
// idempotent or a compare-and-set on the task record, so a loop of a deposed
// leader that is still finishing a step cannot double a task. Liveness: a
// new leader resumes every loop within one lease TTL (plus about a second)
// of the old one's death.
package scheduler
