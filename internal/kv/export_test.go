package kv

import "github.com/nats-io/nats.go/jetstream"

// DecodeFast reads data with the hand-written reader alone, without the
// encoding/json fallback.
func DecodeFast(data []byte) (*Record, error) {
	var r Record
	return &r, r.decode(data)
}

// ParsePubAck reads a publish acknowledgement's sequence, with the
// encoding/json fallback.
var (
	ParsePubAck = parsePubAck
	ErrSlow     = errSlow
)

// ScanPubAck reads a publish acknowledgement with the hand-written reader
// alone.
func ScanPubAck(data []byte) (jetstream.PubAck, error) {
	stream, seq, duplicate, domain, err := scanPubAck(data)
	return jetstream.PubAck{Stream: string(stream), Sequence: seq, Duplicate: duplicate, Domain: string(domain)}, err
}

// ReadPubAck reads a whole publish acknowledgement, with the encoding/json
// fallback.
func ReadPubAck(data []byte) (jetstream.PubAck, error) { return readPubAck(data, &streamNames{}) }
