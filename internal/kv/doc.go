// Package kv owns ax's durable state in JetStream key-value buckets: the task
// record, the task state machine (one transition table, [CanTransition]), the
// compare-and-set transitions that move a record, and the buckets themselves.
//
// Safety: every state change is one KV write conditioned on the revision that
// was read, so of two writers that read the same revision exactly one
// succeeds; the loser gets [ErrConflict] and must not act as if it had moved
// the task. No code outside this package assigns a record's state, nor its
// binding (the message that runs it): [Record.Bind] is its one writer.
//
// Trail: each record carries the moves that produced it (from, to, worker,
// time, duration, error, operator action), so the record is its own trail and
// a move costs one write. A deployment can also mirror each move to the
// AX_TRAIL stream ([StoreConfig.TrailStream]).
//
// Unique tasks: [Claims] writes a unique key's claim in AX_UNIQUE by
// compare-and-set, so of concurrent claims exactly one is stored, and each
// claim lives for its period at most (its per-message TTL). It reads with
// direct gets that name one key, so that a producer whose permissions are
// limited to its tenant's keys can use it.
//
// Limits: [Limits] is the mesh's configuration of concurrency and rate
// limits and pauses (AX_CONTROL key [LimitsKey]); [LimitUse] keeps each
// limit's use in AX_LIMITS by compare-and-set: the slots held, each with an
// expiry its holder renews (so a dead holder's slots expire), and a token
// bucket per rate limit.
package kv
