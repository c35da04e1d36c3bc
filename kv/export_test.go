package kv

// DecodeFast reads data with the hand-written reader alone, without the
// encoding/json fallback.
func DecodeFast(data []byte) (*Record, error) {
	var r Record
	return &r, r.decode(data)
}

// ScanPubAck reads a publish acknowledgement with the hand-written reader
// alone; ParsePubAck with its encoding/json fallback.
var (
	ScanPubAck  = scanPubAck
	ParsePubAck = parsePubAck
	ErrSlow     = errSlow
)
