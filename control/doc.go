// Package control owns the AX_CONTROL bucket, ax's noticeboard: the keys
// every process reads or writes there and the reports the scheduler
// publishes (the reconciler's, the mistyped submits', the unserved
// deadlines). The Go client a service imports to submit (package ax) reads
// only the backpressure report; the workers write the shard tables; the
// scheduler, the management API and the dashboard read the rest.
package control
