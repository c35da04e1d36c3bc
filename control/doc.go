// Package control owns the AX_CONTROL bucket, ax's noticeboard: every key
// ([PressureKey], [ShardTableKey], …) and the one Go definition of what each
// holds, used by its writers and its readers alike: the backpressure report
// ([Pressure]), the workers' shard tables ([ShardTable], [PoolTable]), the
// cron jobs ([CronJob]), the operator's limits and pauses ([Limits]) and
// unserved deadlines ([UnservedDeadlines]), the leader's reports
// ([ReconcilerReport], [RejectsReport]) and a fair deployment's tenants
// ([Tenants]). The Go client a service imports to submit (package ax) reads
// the backpressure report and writes cron jobs; the workers write the shard
// tables; the scheduler, the management API and the dashboard read the rest.
// ax's TestControlValuesMatchTheirSchemas decodes what the running roles
// write under every key strictly into these types.
//
// The older names stay as aliases: ax.Pressure, ax.CronJob
// (CronJob[ax.TaskSpec]), worker.ShardTable, worker.PoolTable,
// worker.Assignment, kv.Limits.
package control
