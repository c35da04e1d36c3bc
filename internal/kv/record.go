package kv

import (
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"github.com/ax-mesh/ax/internal/streams"
	"time"
	"unicode/utf8"
)

// MaxTrail is how many moves a record keeps; older moves are dropped except
// the first (the record's birth).
const MaxTrail = 64

// Record is the durable state of one task in the AX_TASKS bucket.
type Record struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	Tenant      string     `json:"tenant"`
	Key         string     `json:"key"`
	Priority    int        `json:"priority"`
	State       State      `json:"state"`
	Attempt     int        `json:"attempt"`      // attempts started so far
	MaxAttempts int        `json:"max_attempts"` // 0: the worker's default
	Timeout     Duration   `json:"timeout"`      // 0: the worker's default
	Core        bool       `json:"core,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	RunAt       *time.Time `json:"run_at,omitempty"`
	// Gen is the dispatch generation: a message whose Ax-Gen is behind it is
	// a stale copy and is dropped. Gen, Stream and StreamSeq are the
	// record's binding: only [Record.Bind] writes them.
	Gen uint64 `json:"gen"`
	// Worker holds the task while RUNNING (and names the last holder after).
	Worker string `json:"worker,omitempty"`
	// Delivery is the message's delivery count when the worker claimed it;
	// a later delivery means the claim lapsed (fencing).
	Delivery uint64 `json:"delivery,omitempty"`
	// Stream and StreamSeq name the task's current message: the one message
	// that may run it while it is READY, RETRYING or RUNNING. Any other
	// message naming the task is a stale copy or a duplicate and is dropped.
	// A zero StreamSeq means no message is bound yet (a record written
	// before its message was seen). Only [Record.Bind] writes them.
	Stream    string `json:"stream,omitempty"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	// Lost counts the attempts whose worker was lost while running them
	// (crashed, frozen or cut off): each counts as a failed attempt.
	Lost int `json:"lost,omitempty"`
	// Burying is the reason the task's outcome was decided as dead while
	// its dead letter could not yet be written; the next delivery goes
	// straight to burying it, without running the handler.
	Burying    string     `json:"burying,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	// DLQSeq is the sequence of the task's dead letter in AX_DLQ.
	DLQSeq uint64 `json:"dlq_seq,omitempty"`
	// Progress is the last progress its handler reported (worker's
	// Task.Progress), kept after the task ends; nil: none reported.
	Progress *Progress `json:"progress,omitempty"`
	// Result is what the handler of a SUCCEEDED task returned (worker's
	// Task.SetResult), written by the compare-and-set that makes it
	// SUCCEEDED and kept for the record's retention. In JSON it is base64
	// (standard, padded), as encoding/json writes bytes; absent when empty.
	Result []byte `json:"result,omitempty"`
	// Trail lists the moves that led here, oldest first.
	Trail []Move `json:"trail"`
}

// Progress is a handler's report of how far a running task has come.
type Progress struct {
	// Percent done, 0 to 100.
	Percent float64 `json:"percent"`
	// Note says what the handler is doing, at most [MaxProgressNote] bytes.
	Note string `json:"note,omitempty"`
	// At is when the handler reported it.
	At time.Time `json:"at"`
}

// MaxProgressNote is how many bytes of a progress note a record keeps.
const MaxProgressNote = 256

// Move is one state change of a task: a trail event.
type Move struct {
	Task   string    `json:"task"`
	From   State     `json:"from,omitempty"` // empty for the record's birth
	To     State     `json:"to"`
	Worker string    `json:"worker,omitempty"`
	At     time.Time `json:"at"`
	Took   Duration  `json:"took,omitempty"` // time spent in From
	Error  string    `json:"error,omitempty"`
	// Action names the operator action or control loop behind the move
	// ("submit", "claim", "cancel", "replay", "aging", …).
	Action string `json:"action,omitempty"`
	// TimedOut is true when the failure behind the move is the attempt
	// running into its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Note says why the move was made where the action alone does not: the
	// first move of a workflow's task (action [ActionRelease]) names the
	// parent whose success released it.
	Note string `json:"note,omitempty"`
}

// ActionRelease is the [Move.Action] of the first move of a workflow's
// task: its release, after its parents (its [Move.Note] says which).
const ActionRelease = "release"

// ActionNoHandler is the [Move.Action] of a task a worker put back READY
// because it has no handler for the task's type: the task waits for a
// worker that has one (its attempt is not counted). The claim just before
// such a move is part of the wait.
const ActionNoHandler = "no_handler"

// ActionSteppedAside is the [Move.Action] of a READY task a worker moved
// to PENDING because a limit held it back and the worker had no room to
// park it: it waits in AX_DELAYED, out of its shard consumer's pending,
// until a run time (worker/limits_aside.go). It is still a READY task
// waiting for its limit, not a delayed one ([Record.WaitsSteppedAside]).
const ActionSteppedAside = "stepped_aside"

// ActionPausedAside is the [Move.Action] of a READY or RETRYING task a
// worker moved to PENDING because its type or tenant was paused: it waits in AX_DELAYED,
// out of its shard consumer's pending, until the leader releases it when
// the pause ends (or its run time comes first). Like a task stepped aside
// it is still a READY task ([Record.WaitsSteppedAside]).
const ActionPausedAside = "paused_aside"

// WaitsSteppedAside reports whether r is PENDING because a worker stepped
// it aside ([ActionSteppedAside], [ActionPausedAside]): the move that took it to PENDING from
// another state than PENDING or PAUSED, as its trail keeps it, is a step
// aside (moves since that left it waiting, a reprioritize or a pause and
// its resume, do not change that).
func (r *Record) WaitsSteppedAside() bool {
	action := r.asideAction()
	return r.State == StatePending && (action == ActionSteppedAside || action == ActionPausedAside)
}

// WaitsPausedAside reports whether r is PENDING because a worker moved it
// aside for a pause of its type or tenant ([ActionPausedAside]), as
// [Record.WaitsSteppedAside] reads the trail.
func (r *Record) WaitsPausedAside() bool {
	return r.State == StatePending && r.asideAction() == ActionPausedAside
}

// HeldPausedAside reports whether r is PAUSED by an operator while it
// waited paused aside ([Record.WaitsPausedAside]): resumed, it waits
// paused aside again.
func (r *Record) HeldPausedAside() bool {
	return r.State == StatePaused && r.asideAction() == ActionPausedAside
}

// WaitsAsideFrom returns the state a task waiting stepped or paused aside
// ([Record.WaitsSteppedAside]) was in when it moved aside: READY, or
// RETRYING for a retry stepped or paused aside once its backoff was over;
// "" when it does not wait aside.
func (r *Record) WaitsAsideFrom() State {
	if !r.WaitsSteppedAside() {
		return ""
	}
	return r.asideMove().From
}

// asideAction returns the action of the move that took r to PENDING from
// another state than PENDING or PAUSED, the last such move its trail
// keeps, or "" when that move went elsewhere or the trail keeps none.
func (r *Record) asideAction() string { return r.asideMove().Action }

// asideMove returns the last move of r's trail from another state than
// PENDING or PAUSED when it went to PENDING, or the zero Move.
func (r *Record) asideMove() Move {
	for i := len(r.Trail) - 1; i >= 0; i-- {
		if m := r.Trail[i]; m.From != StatePending && m.From != StatePaused {
			if m.To != StatePending {
				return Move{}
			}
			return m
		}
	}
	return Move{}
}

// Actor says who makes a move and why; it fills the trail event.
type Actor struct {
	Worker string // worker id, or "" for a client or operator
	Action string // see [Move.Action]
	Error  string // the failure that caused the move, if any
	// TimedOut says the failure is the attempt's timeout ([Move.TimedOut]).
	TimedOut bool
	Note     string // why, beside the action ([Move.Note]); cut as an error is
	// Released, for a record born RUNNING on a worker's first sight of its
	// message, makes the READY move before the claim a release
	// ([ActionRelease]) with this note, instead of a publish.
	Released string
}

// MaxErrorLen is how many bytes of an error a record, a trail move or a
// dead letter's Ax-Error header keeps; [CutError] cuts longer ones.
const MaxErrorLen = 4 << 10

// CutError returns s cut to at most [MaxErrorLen] bytes (at a UTF-8
// boundary) with a marker naming its full length, or s itself if it fits.
// An unbounded error in every trail move would make records too large to
// write, and a task whose every write fails cycles forever.
func CutError(s string) string {
	if len(s) <= MaxErrorLen {
		return s
	}
	marker := fmt.Sprintf(" …[cut: %d bytes in all]", len(s))
	n := MaxErrorLen - len(marker)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + marker
}

// record appends the move to the trail; every error stored in the record
// passes through [CutError] here.
func (r *Record) record(from, to State, actor Actor, now time.Time) {
	r.LastError = CutError(r.LastError)
	r.Burying = CutError(r.Burying)
	var took time.Duration
	if n := len(r.Trail); n > 0 {
		took = now.Sub(r.Trail[n-1].At)
	}
	r.State = to
	r.UpdatedAt = now
	m := Move{Task: r.ID, From: from, To: to, Worker: actor.Worker, At: now, Took: Duration(took), Error: CutError(actor.Error), Action: actor.Action,
		TimedOut: actor.TimedOut, Note: CutError(actor.Note)}
	if len(r.Trail) >= MaxTrail {
		r.Trail = append(r.Trail[:1], r.Trail[len(r.Trail)-MaxTrail+2:]...)
	}
	r.Trail = append(r.Trail, m)
}

// LastMove returns the move that produced this revision.
func (r *Record) LastMove() Move {
	if len(r.Trail) == 0 {
		return Move{}
	}
	return r.Trail[len(r.Trail)-1]
}

// Duration is a [time.Duration] that reads and writes JSON as "1.5s"
// ([axtype.Duration]).
type Duration = axtype.Duration

// Bind names the message that runs the task: generation gen, stored in
// stream at seq. It is the one writer of the record's binding ([Record.Gen],
// [Record.Stream], [Record.StreamSeq]), as [Store.Apply] is of its state: a
// move to another message ([github.com/ax-mesh/ax/internal/move]), a worker
// binding the first message it meets, a record born naming its message all
// go through it, so the rule "only the message the record names runs the
// task" has one place to read. A stream of "" and a seq of 0 unbind the
// record (no message is bound; the generation stays). Nothing outside this
// package assigns the three fields (TestOnlyBindWritesTheBinding reads the
// module's sources for it).
//
// A generation only grows: a message whose Ax-Gen is behind the record's is
// dropped as stale, so binding a lower one would strand the message bound.
// Bind does not check it; the callers pass the record's generation or a
// message's that is ahead of it.
func (r *Record) Bind(gen uint64, stream string, seq uint64) {
	r.Gen, r.Stream, r.StreamSeq = gen, stream, seq
}

// MessageStream returns the stream of the record's current message: its
// Stream, or, for a record written before Stream was kept, the bucket of
// its priority.
func (r *Record) MessageStream(names streams.Names) string {
	if r.Stream != "" {
		return r.Stream
	}
	return names.PriorityStream(r.Priority)
}

// Names reports whether the record names the message at seq of stream as
// the task's current message (the one message that may run it).
func (r *Record) Names(names streams.Names, stream string, seq uint64) bool {
	return r.StreamSeq != 0 && r.StreamSeq == seq && r.MessageStream(names) == stream
}

// SamePending reports whether r is the PENDING record want describes (same
// tenant, type, key, priority and run time): a repeated submit or delivery
// of the same delayed task, not another task with its id.
func (r *Record) SamePending(want *Record) bool {
	return r.State == StatePending && r.Tenant == want.Tenant && r.Type == want.Type && r.Key == want.Key &&
		r.Priority == want.Priority && r.RunAt != nil && want.RunAt != nil && r.RunAt.Equal(*want.RunAt)
}
