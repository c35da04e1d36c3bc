package admin

import (
	"github.com/ax-mesh/ax/axtype"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

// Verbs of the management API; each is served on "<prefix>.admin.<verb>".
const (
	VerbTaskGet          = "task.get"
	VerbTaskTrail        = "task.trail"
	VerbTaskCancel       = "task.cancel"
	VerbTaskPause        = "task.pause"
	VerbTaskResume       = "task.resume"
	VerbTaskReprioritize = "task.reprioritize"
	VerbTasksCancel      = "tasks.cancel"
	VerbDLQList          = "dlq.list"
	VerbDLQReplay        = "dlq.replay"
	VerbStats            = "stats"
	VerbWorkers          = "workers"
	VerbTasksList        = "tasks.list"
	VerbControl          = "control"
	VerbRejectsSample    = "rejects.sample"
	VerbUnservedDeadline = "unserved.deadline"
	VerbLimitSet         = "limit.set"
	VerbLimitRemove      = "limit.rm"
	VerbLimitList        = "limit.ls"
	VerbPause            = "pause"
	VerbResume           = "resume"
	VerbWorkflowCancel   = "workflow.cancel"
	VerbWorkflowList     = "workflow.list"
	VerbWorkflowPause    = "workflow.pause"
	VerbWorkflowResume   = "workflow.resume"
	VerbWorkflowGet      = "workflow.get"
)

// Verbs returns every verb of the management API.
func Verbs() []string {
	return []string{VerbTaskGet, VerbTaskTrail, VerbTaskCancel, VerbTaskPause, VerbTaskResume,
		VerbTaskReprioritize, VerbTasksCancel, VerbDLQList, VerbDLQReplay, VerbStats, VerbWorkers,
		VerbTasksList, VerbControl, VerbRejectsSample, VerbUnservedDeadline,
		VerbLimitSet, VerbLimitRemove, VerbLimitList, VerbPause, VerbResume, VerbWorkflowCancel, VerbWorkflowList,
		VerbWorkflowPause, VerbWorkflowResume, VerbWorkflowGet}
}

// TaskRequest names one task (task.get, task.trail, task.cancel, task.pause,
// task.resume). A task id belongs to its tenant: without Tenant the verb
// acts on the one tenant's task with a record of ID, and answers 409 when
// tasks of several tenants have it.
type TaskRequest struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	// Unseen lets task.cancel and task.pause act on a task that has no
	// record yet (published raw, not seen by any worker): the record is
	// written first, and the worker that later sees the task obeys it. It
	// needs Tenant.
	Unseen bool `json:"unseen,omitempty"`
}

// ReprioritizeRequest moves a READY task to another priority bucket.
type ReprioritizeRequest struct {
	ID       string `json:"id"`
	Tenant   string `json:"tenant,omitempty"` // as for [TaskRequest]
	Priority int    `json:"priority"`         // 0 (P0, highest) .. 4 (P4)
}

// TaskReply is the record after an action, or as read by task.get.
type TaskReply struct {
	Task     *kv.Record `json:"task"`
	Revision uint64     `json:"revision"`
	// Created is true when the action wrote the task's first record.
	Created bool `json:"created,omitempty"`
	// Unclaimed is true when task.get found the task waiting in its bucket
	// with no record yet: a task submitted without an id or key of its own
	// gets its record when a worker claims it, and Task is the READY record
	// that claim starts from (Revision 0: none is stored yet).
	Unclaimed bool `json:"unclaimed,omitempty"`
	// Notified is true when the worker running a cancelled task confirmed
	// that its handler's context was cancelled.
	Notified bool `json:"notified,omitempty"`
	// Redispatched is true when a new copy of the task's message (the next
	// generation) was published to its bucket.
	Redispatched bool `json:"redispatched,omitempty"`
	// Deleted is true when the action removed the task's record: a task
	// paused before any message of it was seen is unseen again once resumed.
	Deleted bool `json:"deleted,omitempty"`
}

// TrailReply lists a task's moves, oldest first.
type TrailReply struct {
	ID     string    `json:"id"`
	Tenant string    `json:"tenant"`
	Trail  []kv.Move `json:"trail"`
	// Omitted counts the moves left out to fit the server's max_payload:
	// the trail keeps its first move and the newest that fit (Truncated).
	Omitted   int  `json:"omitted,omitempty"`
	Truncated bool `json:"truncated,omitempty"`
}

// Filter selects tasks or dead letters; empty fields match everything.
type Filter struct {
	Type   string         `json:"type,omitempty"`
	Tenant string         `json:"tenant,omitempty"`
	States []axtype.State `json:"states,omitempty"` // tasks.cancel only
}

// BatchCancelRequest cancels every task that matches a filter. At least one
// filter field is required.
type BatchCancelRequest struct {
	Filter
	// DryRun counts and lists the matching tasks without cancelling them.
	DryRun bool `json:"dry_run,omitempty"`
}

// BatchCancelReply says what tasks.cancel matched and did.
type BatchCancelReply struct {
	DryRun    bool `json:"dry_run"`
	Matched   int  `json:"matched"`
	Cancelled int  `json:"cancelled"`
	// Tasks lists the matched tasks, at most [MaxListedIDs].
	Tasks []kv.Ref `json:"tasks"`
	// Failed maps a task ([kv.Ref.String]: "order-42 (tenant acme)") to why
	// it was not cancelled (it moved on, e.g. finished, between the scan
	// and the write); FailedCount counts them.
	Failed      map[string]string `json:"failed,omitempty"`
	FailedCount int               `json:"failed_count,omitempty"`
	// Truncated is true when Tasks or Failed list fewer than they would,
	// cut to fit the server's max_payload; Matched, Cancelled and
	// FailedCount still count them all.
	Truncated bool `json:"truncated,omitempty"`
	// Unreadable reports the records the scan could not decode: whether
	// they match is unknown, and they were not cancelled (nil: none).
	Unreadable *Unreadable `json:"unreadable,omitempty"`
}

// Unreadable reports the task records a scan met but could not decode.
type Unreadable struct {
	Count int `json:"count"`
	// Errors maps a record key ("<tenant>.<id>") to why its record does
	// not decode, for at most [MaxListedIDs] records, fewer when the reply
	// had to be cut to fit the server's max_payload (Omitted counts those
	// left out).
	Errors  map[string]string `json:"errors"`
	Omitted int               `json:"omitted,omitempty"`
}

// MaxListedIDs bounds the ids a batch reply lists.
const MaxListedIDs = 1000

// DLQListRequest lists dead letters, oldest first, one page at a time.
type DLQListRequest struct {
	Filter
	Limit int `json:"limit,omitempty"` // default 100, at most 10,000
	// After lists the letters whose sequence is above it: the Next of the
	// previous page. 0: from the first.
	After uint64 `json:"after,omitempty"`
}

// DeadLetter is one message in AX_DLQ.
type DeadLetter struct {
	Seq      uint64    `json:"seq"`
	TaskID   string    `json:"task_id"`
	Tenant   string    `json:"tenant"`
	Type     string    `json:"type"`
	Subject  string    `json:"subject"` // the submit subject a replay publishes to
	Error    string    `json:"error"`
	Attempts int       `json:"attempts"`
	FailedAt time.Time `json:"failed_at"`
	Size     int       `json:"size"` // payload bytes
}

// DLQListReply is one page of dead letters.
type DLQListReply struct {
	Letters []DeadLetter `json:"letters"`
	// Total is how many dead letters match the filter, in all pages.
	Total uint64 `json:"total"`
	// Next is set when more letters follow this page: ask again with it as
	// After. 0: this page is the last.
	Next uint64 `json:"next,omitempty"`
	// Truncated is true when the page holds fewer letters than the limit
	// because the reply had to fit the server's max_payload (or the
	// request's time ran short); Next says where the rest starts.
	Truncated bool `json:"truncated,omitempty"`
}

// DLQReplayRequest replays one task (ID, of Tenant when given: as for
// [TaskRequest]) or the dead letters matching a filter, up to Limit.
type DLQReplayRequest struct {
	ID string `json:"id,omitempty"`
	Filter
	Limit  int  `json:"limit,omitempty"` // default 100, at most 10,000
	DryRun bool `json:"dry_run,omitempty"`
}

// DLQReplayReply says which tasks went back to READY.
type DLQReplayReply struct {
	DryRun   bool              `json:"dry_run"`
	Replayed []kv.Ref          `json:"replayed"`
	Skipped  map[string]string `json:"skipped,omitempty"` // task ([kv.Ref.String]) or "dlq#<seq>" -> reason
	// ReplayedCount and SkippedCount count them all; Truncated is true when
	// Replayed or Skipped lists part of them, cut to fit the server's
	// max_payload.
	ReplayedCount int  `json:"replayed_count"`
	SkippedCount  int  `json:"skipped_count,omitempty"`
	Truncated     bool `json:"truncated,omitempty"`
}

// StatsRequest asks for bucket statistics over a window of recent records.
type StatsRequest struct {
	// Window of finished tasks the rates and run times cover, as a Go
	// duration. Default "5m".
	Window string `json:"window,omitempty"`
}

// StatsReply describes every priority bucket and the dead-letter stream.
type StatsReply struct {
	Window  axtype.Duration `json:"window"`
	Buckets []BucketStats   `json:"buckets"`
	// States counts the tasks per state, all buckets: the records, and
	// in READY also the tasks waiting in their buckets without a record
	// yet (BucketStats.Unrecorded).
	States  map[axtype.State]int `json:"states"`
	DLQ     uint64               `json:"dlq"` // dead letters stored
	Records int                  `json:"records"`
	// Types describes each task type with tasks finished in the window,
	// sorted by type: timeouts are set per type, so this is where to read
	// the recommended one.
	Types []TypeStats `json:"types"`
	// Limits lists the mesh's limits with their use, and the paused types
	// and tenants (nil: none).
	Limits *LimitsReply `json:"limits,omitempty"`
	// Unreadable reports the records the scan could not decode; they are
	// in no count (nil: none).
	Unreadable *Unreadable `json:"unreadable,omitempty"`
	// Reconciler is the leader reconciler's last report: lost tasks found
	// and repaired. Nil until a leader ran it.
	Reconciler *control.ReconcilerReport `json:"reconciler,omitempty"`
	// Rejects is the leader's report of mistyped submit subjects it saw
	// (messages no bucket stored). Nil until a leader ran its watch.
	Rejects *control.RejectsReport `json:"rejects,omitempty"`
	// Tenants lists, on a fair deployment, each tenant's queue of each
	// bucket with tasks: waiting and in flight, summed over the tenant's
	// consumers of the bucket; the most waiting first (nil: none, or not
	// a fair deployment).
	Tenants []TenantQueue `json:"tenants,omitempty"`
	// Unserved lists the task types waiting in the buckets that no live
	// worker serves, with their depth and the store time of their oldest
	// message ([kv.UnservedTypes]); nil when there are none.
	Unserved []kv.Unserved `json:"unserved,omitempty"`
	// Truncated is true when the reply was cut to fit the server's
	// max_payload: TypesOmitted task types (those with the fewest tasks
	// finished in the window) and UnservedOmitted unserved types (the
	// shallowest) are left out, and Unreadable lists part of its errors.
	Truncated       bool `json:"truncated,omitempty"`
	TypesOmitted    int  `json:"types_omitted,omitempty"`
	UnservedOmitted int  `json:"unserved_omitted,omitempty"`
}

// TypeStats describes the tasks of one type that finished in the window.
type TypeStats struct {
	Type      string `json:"type"`
	Succeeded int    `json:"succeeded"`
	Dead      int    `json:"dead"`
	// Retried counts finished tasks that needed more than one attempt;
	// TimedOut counts those with an attempt that ran into its timeout.
	Retried  int `json:"retried"`
	TimedOut int `json:"timed_out"`
	// Run time of the last attempt, as for [BucketStats].
	Samples int             `json:"samples"`
	P50     axtype.Duration `json:"p50"`
	P99     axtype.Duration `json:"p99"`
	// Timeout is the longest timeout the tasks ran under (a claim writes
	// the effective one into the record); RecommendedTimeout is 1.5 x p99
	// rounded up to the second.
	Timeout            axtype.Duration `json:"timeout"`
	RecommendedTimeout axtype.Duration `json:"recommended_timeout"`
}

// BucketStats describes one priority bucket.
// TenantQueue is one tenant's tasks in one bucket of a fair deployment.
type TenantQueue = streams.TenantQueue

type BucketStats struct {
	Priority int    `json:"priority"`
	Stream   string `json:"stream"`
	// Depth is the messages stored (waiting and in flight: a WorkQueue keeps
	// a message until it is acked); Capacity is the bucket's MaxMsgs.
	Depth    uint64 `json:"depth"`
	Capacity int64  `json:"capacity"`
	// InFlight is the messages delivered and not yet acknowledged.
	InFlight int `json:"in_flight"`
	// Unrecorded estimates the tasks waiting in the bucket that have no
	// record yet: submitted without an id or key of their own, or by a
	// publish-only producer, their record is written by the worker that
	// claims them (docs/decisions/record-at-claim.md). It is Depth less the
	// unfinished records bound to the bucket's messages, read one after
	// the other (a snapshot, not a count under one lock).
	Unrecorded uint64 `json:"unrecorded"`
	// Rates per second over the window: submitted (records created: a
	// task whose record its claim writes counts from then on, with the
	// time it was published), succeeded and dead.
	SubmittedRate float64 `json:"submitted_per_s"`
	SucceededRate float64 `json:"succeeded_per_s"`
	DeadRate      float64 `json:"dead_per_s"`
	// Run time of the last attempt of the tasks finished in the window.
	Samples int             `json:"samples"`
	P50     axtype.Duration `json:"p50"`
	P99     axtype.Duration `json:"p99"`
	// RecommendedTimeout is 1.5 x p99 rounded up to the second (0: no data).
	RecommendedTimeout axtype.Duration `json:"recommended_timeout"`
}

// WorkersReply lists the live workers, sorted by id.
type WorkersReply struct {
	Workers []kv.Member `json:"workers"`
	// Omitted counts the workers left out to fit the server's max_payload
	// (Truncated); those listed come first by id.
	Omitted   int  `json:"omitted,omitempty"`
	Truncated bool `json:"truncated,omitempty"`
}

// Member is a live worker's membership record in AX_WORKERS, as
// [WorkersReply] lists it.
type Member = kv.Member

// Unserved is a task type with tasks waiting that no live worker serves, as
// [StatsReply] reports it.
type Unserved = kv.Unserved
