// Package streams owns ax's data layout on JetStream: the names of streams,
// subjects and consumers, the wire headers of the contract (docs/WIRE.md), the shard
// function, and the idempotent provisioning of every stream and consumer.
//
// Layout (with the default prefix "ax"):
//
//	ax.submit.p<N>.<tenant>.<type>.<key>      what services publish
//	AX_P<N>: ax.p<N>.<shard>.<tenant>.<type>.<key>   what workers consume
//	AX_DLQ:  ax.dlq.<tenant>.<type>           dead letters
//	AX_TRAIL: ax.trail.<task id>              optional trail events
//
// The shard of a key is FNV-1a 32-bit of the key token mod [Shards]; the
// stream's subject transform computes the same value on the server, and
// [Shard] lets tools predict it. The shard count is part of the data layout:
// [Provision] refuses to change the transform of an existing stream.
package streams
