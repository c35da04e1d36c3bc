package streams

import "hash/fnv"

// Shard returns the shard the server's partition(32, key) transform assigns
// to a task key: FNV-1a 32-bit of the key token modulo [Shards].
func Shard(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % Shards)
}
