package bench

import (
	"github.com/ax-mesh/ax/internal/kv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// serverStats is what the server says about itself at one moment: its
// message counters (varz), its JetStream API counter, each stream's last
// sequence and message count, and its consumers' deliveries (jsz).
type serverStats struct {
	cpu       time.Duration // the server process's CPU; 0 when it runs in this process
	inMsgs    int64         // messages received from clients
	outMsgs   int64         // messages sent to clients
	api       uint64        // JetStream API requests
	delivered uint64        // deliveries of every consumer
	streams   map[string]streamStats
}

type streamStats struct{ last, msgs uint64 }

// serverStats asks the run's own server; nil for a server given by URL.
func (e *env) serverStats() *serverStats {
	var v *server.Varz
	var js *server.JSInfo
	jsOpts := server.JSzOptions{Accounts: true, Streams: true, Consumer: true}
	switch {
	case e.child != nil:
		v, js = &server.Varz{}, &server.JSInfo{}
		if e.child.get("/varz", v) != nil || e.child.get("/jsz?accounts=true&streams=true&consumers=true", js) != nil {
			return nil
		}
	case e.srv != nil:
		var err error
		if v, err = e.srv.Varz(nil); err != nil {
			return nil
		}
		if js, err = e.srv.Jsz(&jsOpts); err != nil {
			return nil
		}
	default:
		return nil
	}
	s := &serverStats{inMsgs: v.InMsgs, outMsgs: v.OutMsgs, api: js.API.Total, streams: map[string]streamStats{}}
	if e.child != nil {
		s.cpu = e.child.cpu()
	}
	for _, acc := range js.AccountDetails {
		for _, st := range acc.Streams {
			s.streams[st.Name] = streamStats{last: st.State.LastSeq, msgs: st.State.Msgs}
			for _, c := range st.Consumer {
				s.delivered += c.Delivered.Consumer
			}
		}
	}
	return s
}

// settleFor bounds how long [env.settledStats] waits for the server.
const settleFor = 2 * time.Second

// settledStats is [env.serverStats] once the server has applied what it
// was sent: an ack is applied after the handler that sent it returned, so a
// snapshot taken at once can miss the last acks (0.78 per message was
// seen). It waits until the messages stored in the non-KV streams read the
// same three times 20 ms apart, at most settleFor.
func (e *env) settledStats() *serverStats {
	s := e.serverStats()
	if s == nil {
		return nil
	}
	stable := 0
	for deadline := time.Now().Add(settleFor); stable < 2 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		next := e.serverStats()
		if next == nil {
			return s
		}
		if stored(next) == stored(s) {
			stable++
		} else {
			stable = 0
		}
		s = next
	}
	return s
}

// stored is the messages of the non-KV streams: tasks not yet acked.
func stored(s *serverStats) uint64 {
	var n uint64
	for name, st := range s.streams {
		if !strings.HasPrefix(name, "KV_") {
			n += st.msgs
		}
	}
	return n
}

// ops returns the server operations per task between two snapshots:
//
//   - msg_writes: messages stored in streams other than KV buckets (tasks,
//     dead letters, trail, the baseline's messages)
//   - kv_writes: writes to KV buckets (task records, leases), records:
//     those of the task bucket alone
//   - acks: messages removed from the non-KV streams (acked or terminated
//     on WorkQueue streams)
//   - deliveries: messages delivered by consumers
//   - api: JetStream API requests (stream and consumer management, info)
//   - in_msgs, out_msgs: every message the server received and sent
//   - requests: in_msgs less the writes, acks and API requests: pull
//     requests, KV reads (direct gets), naks and heartbeats, which the
//     server does not count apart
func ops(before, after *serverStats, tasks int, recordBucket string) map[string]float64 {
	if before == nil || after == nil || tasks == 0 {
		return nil
	}
	var msgWrites, kvWrites, records, acks float64
	for name, a := range after.streams {
		b := before.streams[name]
		writes := float64(a.last - b.last)
		if strings.HasPrefix(name, "KV_") {
			kvWrites += writes
			if name == kv.StreamName(recordBucket) {
				records += writes
			}
			continue
		}
		msgWrites += writes
		acks += writes - (float64(a.msgs) - float64(b.msgs))
	}
	in := float64(after.inMsgs - before.inMsgs)
	n := float64(tasks)
	api := float64(after.api - before.api)
	return map[string]float64{
		"msg_writes": msgWrites / n,
		"kv_writes":  kvWrites / n,
		"records":    records / n,
		"acks":       acks / n,
		"deliveries": float64(after.delivered-before.delivered) / n,
		"api":        api / n,
		"in_msgs":    in / n,
		"out_msgs":   float64(after.outMsgs-before.outMsgs) / n,
		"requests":   (in - msgWrites - kvWrites - acks - api) / n,
	}
}
