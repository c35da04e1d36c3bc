package move

import (
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReleaseNow returns the move that releases rec's task (read at rev),
// waiting aside in AX_DELAYED, into its bucket at once, before its run
// time: a copy of its schedule marked released at now, the record READY
// naming it with its run time set to now (trail action action), the
// schedule deleted. The leader's resumer and the management API's
// task.resume release a task paused aside with it.
func ReleaseNow(names streams.Names, rec *kv.Record, rev uint64, schedule *jetstream.RawStreamMsg, action string, now time.Time) Request {
	set := nats.Header{}
	set.Set(streams.HeaderReleasedAt, now.UTC().Format(time.RFC3339Nano))
	return Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: rec.Priority,
		Actor:  kv.Actor{Action: action},
		Copy:   Copy{Data: schedule.Data, Header: schedule.Header, Drop: []string{streams.HeaderSubject}, Set: set},
		Old:    Message{Stream: names.DelayedStream(), Seq: schedule.Sequence},
		Mutate: func(next *kv.Record) error { next.RunAt = &now; return nil }}
}
