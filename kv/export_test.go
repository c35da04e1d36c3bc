package kv

// DecodeFast reads data with the hand-written reader alone, without the
// encoding/json fallback.
func DecodeFast(data []byte) (*Record, error) {
	var r Record
	return &r, r.decode(data)
}
