package streams

import (
	"cmp"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"strings"
)

// Shards is the number of partitions of every priority stream. It is part of
// the data layout and cannot change on an existing deployment.
const Shards = 32

// Priorities is the number of priority buckets, P0 (highest) to P4 (lowest).
const Priorities = axtype.Priorities

// DefaultPrefix is the subject prefix of a deployment ("ax"); stream and
// bucket names use its upper-case form ("AX").
const DefaultPrefix = "ax"

// Names derives every subject, stream, consumer and bucket name of one
// deployment from its prefix. The zero value is the default deployment's
// ([DefaultPrefix]); [NewNames] validates another prefix.
type Names struct {
	prefix string // subject prefix, e.g. "ax"
	upper  string // stream and bucket prefix, e.g. "AX"
}

// NewNames returns the names for prefix, or for [DefaultPrefix] when prefix
// is empty. The prefix must be a valid subject token.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidateToken("prefix", prefix); err != nil {
		return Names{}, err
	}
	return Names{prefix: prefix, upper: strings.ToUpper(prefix)}, nil
}

// DefaultNames returns the names of the default "ax" deployment.
func DefaultNames() Names {
	return Names{prefix: DefaultPrefix, upper: strings.ToUpper(DefaultPrefix)}
}

// Prefix returns the subject prefix ([DefaultPrefix] for the zero Names).
func (n Names) Prefix() string { return cmp.Or(n.prefix, DefaultPrefix) }

// upperPrefix returns the stream and bucket prefix ("AX" for the zero Names).
func (n Names) upperPrefix() string { return cmp.Or(n.upper, defaultUpper) }

// defaultUpper is the stream and bucket prefix of [DefaultPrefix].
const defaultUpper = "AX"

// PriorityOf returns the priority of a priority stream's name ("AX_P2": 2),
// and false for any other name.
func (n Names) PriorityOf(stream string) (int, bool) {
	for p := range Priorities {
		if stream == n.PriorityStream(p) {
			return p, true
		}
	}
	return 0, false
}

// PriorityStream returns the stream name of priority p, e.g. "AX_P2".
func (n Names) PriorityStream(p int) string { return fmt.Sprintf("%s_P%d", n.upperPrefix(), p) }

// DLQStream returns the dead-letter stream name, e.g. "AX_DLQ".
func (n Names) DLQStream() string { return n.upperPrefix() + "_DLQ" }

// TrailStream returns the trail stream name, e.g. "AX_TRAIL".
func (n Names) TrailStream() string { return n.upperPrefix() + "_TRAIL" }

// DelayedStream returns the delayed-task stream name, e.g. "AX_DELAYED".
func (n Names) DelayedStream() string { return n.upperPrefix() + "_DELAYED" }

// TasksBucket returns the KV bucket of task records, e.g. "AX_TASKS".
func (n Names) TasksBucket() string { return n.upperPrefix() + "_TASKS" }

// LocksBucket returns the KV bucket of leases, e.g. "AX_LOCKS".
func (n Names) LocksBucket() string { return n.upperPrefix() + "_LOCKS" }

// WorkersBucket returns the KV bucket of worker membership, e.g. "AX_WORKERS".
func (n Names) WorkersBucket() string { return n.upperPrefix() + "_WORKERS" }

// ControlBucket returns the KV bucket of control state, e.g. "AX_CONTROL".
func (n Names) ControlBucket() string { return n.upperPrefix() + "_CONTROL" }

// UniqueBucket returns the KV bucket of unique-task claims, e.g.
// "AX_UNIQUE" (docs/WIRE.md, "Unique tasks").
func (n Names) UniqueBucket() string { return n.upperPrefix() + "_UNIQUE" }

// LimitsBucket returns the KV bucket of the mesh-wide limits' use (slots
// held and rate tokens), e.g. "AX_LIMITS" (docs/WIRE.md, "Limits and
// pauses").
func (n Names) LimitsBucket() string { return n.upperPrefix() + "_LIMITS" }

// SubmitSubject returns the subject a service publishes a task to.
func (n Names) SubmitSubject(priority int, tenant, taskType, key string) string {
	return fmt.Sprintf("%s.submit.p%d.%s.%s.%s", n.Prefix(), priority, tenant, taskType, key)
}

// SubmitFilter returns the submit subjects captured by priority stream p.
// The leader removes it from the stream while the bucket refuses non-core
// tasks (backpressure), so that the server itself refuses them.
func (n Names) SubmitFilter(p int) string { return fmt.Sprintf("%s.submit.p%d.*.*.*", n.Prefix(), p) }

// CoreSubject returns the subject a producer allowed to submit core tasks
// publishes a task to, e.g. "ax.core.p0.acme.email.k1". A core task is
// admitted while its bucket refuses others (backpressure); being core is
// the permission to publish here (docs/ax-permissions.conf), not a header.
func (n Names) CoreSubject(priority int, tenant, taskType, key string) string {
	return fmt.Sprintf("%s.core.p%d.%s.%s.%s", n.Prefix(), priority, tenant, taskType, key)
}

// CoreFilter returns the core submit subjects captured by priority stream p.
func (n Names) CoreFilter(p int) string { return fmt.Sprintf("%s.core.p%d.*.*.*", n.Prefix(), p) }

// IngestFilter returns the source of priority stream p's shard transform:
// both submit forms, "<prefix>.submit.p<N>.*.*.*" and "<prefix>.core.p<N>.*.*.*".
func (n Names) IngestFilter(p int) string { return fmt.Sprintf("%s.*.p%d.*.*.*", n.Prefix(), p) }

// StoredSubject returns the subject a task is stored under in its priority stream.
func (n Names) StoredSubject(priority, shard int, tenant, taskType, key string) string {
	return fmt.Sprintf("%s.p%d.%d.%s.%s.%s", n.Prefix(), priority, shard, tenant, taskType, key)
}

// controlToken ends the subject of a control-plane copy.
const controlToken = "ctl"

// CopySubject returns the subject of a control-plane copy of a task (a
// release, aging, resume, reprioritize, replay or recovery): its stored
// subject with a last token "ctl", published as is (no transform).
// Only the control plane may publish on it (see docs/ax-permissions.conf):
// a worker honours the internal headers (Ax-Task-Id, Ax-Gen,
// Ax-Waiting-Since, Ax-Released-At) of a message stored under it, and of no
// other.
func (n Names) CopySubject(priority int, tenant, taskType, key string) string {
	return fmt.Sprintf("%s.p%d.%d.%s.%s.%s.%s", n.Prefix(), priority, Shard(key), tenant, taskType, key, controlToken)
}

// CopyFilter returns the control-plane copy subjects captured by priority
// stream p.
func (n Names) CopyFilter(p int) string {
	return fmt.Sprintf("%s.p%d.*.*.*.*.%s", n.Prefix(), p, controlToken)
}

// ShardTransform returns the subject transform destination of priority
// stream p (its source is [Names.IngestFilter]): a task submitted on either
// subject is stored as "<prefix>.p<N>.<shard>.<tenant>.<type>.<key>", the
// shard a hash of the key alone.
func (n Names) ShardTransform(p int) string {
	return fmt.Sprintf("%s.p%d.{{partition(%d,4)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}", n.Prefix(), p, Shards)
}

// StoredFilter returns the subjects of every task stored in priority
// stream p, control-plane copies included: "<prefix>.p<N>.>".
func (n Names) StoredFilter(p int) string { return fmt.Sprintf("%s.p%d.>", n.Prefix(), p) }

// StoredMessageFilter returns the subjects of the tasks a producer's
// message stored in priority stream p (not the control-plane copies) of
// tenant and taskType, "*" for any of each: "<prefix>.p<N>.*.<tenant>.<type>.*".
func (n Names) StoredMessageFilter(p int, tenant, taskType string) string {
	return fmt.Sprintf("%s.p%d.*.%s.%s.*", n.Prefix(), p, tenant, taskType)
}

// StoredIDFilter returns the subject of a task stored in priority stream
// p whose key is its id (a task submitted without a key or an id of its
// own), of tenant ("*" for any) and any type:
// "<prefix>.p<N>.<shard of id>.<tenant>.*.<id>".
func (n Names) StoredIDFilter(p int, tenant, id string) string {
	return fmt.Sprintf("%s.p%d.%d.%s.*.%s", n.Prefix(), p, Shard(id), tenant, id)
}

// ShardFilter returns the filter subject of the consumer of (priority, shard).
func (n Names) ShardFilter(p, shard int) string {
	return fmt.Sprintf("%s.p%d.%d.>", n.Prefix(), p, shard)
}

// ConsumerName returns the durable consumer name of (priority, shard), e.g. "p0-s07".
func (n Names) ConsumerName(p, shard int) string {
	return fmt.Sprintf("%s%02d", consumerPrefix(p), shard)
}

// consumerPrefix begins the name of every consumer of priority stream p,
// a shard's or a type's: "p<N>-s".
func consumerPrefix(p int) string { return fmt.Sprintf("p%d-s", p) }

// DLQSubject returns the dead-letter subject of a task.
func (n Names) DLQSubject(tenant, taskType string) string {
	return fmt.Sprintf("%s.dlq.%s.%s", n.Prefix(), tenant, taskType)
}

// DLQFilter returns the subjects of the dead-letter stream.
func (n Names) DLQFilter() string { return n.Prefix() + ".dlq.>" }

// TrailSubject returns the trail subject of tenant's task taskID,
// "ax.trail.<tenant>.<id>": a task id belongs to its tenant.
func (n Names) TrailSubject(tenant, taskID string) string {
	return n.Prefix() + ".trail." + tenant + "." + taskID
}

// TrailFilter returns the subjects of the trail stream.
func (n Names) TrailFilter() string { return n.Prefix() + ".trail.>" }

// AdminSubject returns the management API subject of verb, e.g. "ax.admin.task.get".
func (n Names) AdminSubject(verb string) string { return n.Prefix() + ".admin." + verb }

// WorkerCancelSubject returns the core subject on which worker id hears that
// an operator cancelled one of its running tasks, e.g. "ax.worker.w1.cancel".
func (n Names) WorkerCancelSubject(workerID string) string {
	return n.Prefix() + ".worker." + workerID + ".cancel"
}
