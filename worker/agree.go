package worker

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// adoptConsumer takes the settings a worker must share with the deployment
// from the shard consumer of (0, 0), as provisioned: the ack wait (an
// explicit [Config.AckWait] must equal it) and the priority policy. Two
// processes that disagree on these run tasks twice (a heartbeat period
// longer than the server's ack wait) or not at all, so a disagreement is
// an error, never a silent default. It runs before any consumer is served.
func (in *intake) adoptConsumer(s *shardSet, info *jetstream.ConsumerInfo) error {
	have := info.Config.AckWait
	if in.cfg.AckWait != 0 && in.cfg.AckWait != have {
		return fmt.Errorf("%w: AckWait is %s here but %s on consumer %s/%s: set the worker's AckWait (--ack-wait) to %s, or leave it zero to adopt the consumers'",
			ErrConfigMismatch, in.cfg.AckWait, have, info.Stream, info.Name, have)
	}
	in.cfg.AckWait = have
	in.policy = info.Config.PriorityPolicy
	return in.checkConsumer(s, 0, 0, info)
}

// checkConsumer verifies that the consumer of (p, shard) agrees with what
// the worker assumes: the ack wait and priority policy it adopted, the
// subject filter of its names (prefix) and shard count, explicit acks and
// unlimited deliveries (ax counts attempts in the record, not the server).
func (in *intake) checkConsumer(s *shardSet, p, shard int, info *jetstream.ConsumerInfo) error {
	c := info.Config
	var diffs []string
	diff := func(field string, have, want any) {
		diffs = append(diffs, fmt.Sprintf("%s is %v on the consumer, %v here", field, have, want))
	}
	if c.AckWait != in.cfg.AckWait {
		diff("AckWait", c.AckWait, in.cfg.AckWait)
	}
	if c.PriorityPolicy != in.policy {
		diff("PriorityPolicy", c.PriorityPolicy, in.policy)
	}
	if want := in.consumerFilter(s, p, shard); c.FilterSubject != want {
		diff("FilterSubject", c.FilterSubject, want+" (names prefix "+in.cfg.Names.Prefix()+")")
	}
	if c.AckPolicy != jetstream.AckExplicitPolicy {
		diff("AckPolicy", c.AckPolicy, jetstream.AckExplicitPolicy)
	}
	if c.MaxDeliver != -1 {
		diff("MaxDeliver", c.MaxDeliver, -1)
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: consumer %s/%s: %s (re-provision the deployment)", ErrConfigMismatch, info.Stream, info.Name, strings.Join(diffs, "; "))
}
