package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// A record write is a publish whose reply is JetStream's publish
// acknowledgement. nats.go's asynchronous publish reads each one with
// encoding/json (and keeps a future with two channels per publish); the
// task path writes two records per task, so the store sends its writes as
// requests and reads their replies here, by hand, and so does the
// [Publisher] of a client's submits. The reader takes the flat
// acknowledgement the server writes, {"stream":…,"seq":…} with "domain"
// or "duplicate"; anything else (an error, a field it does not know) goes
// to encoding/json, as nats.go reads it.

// pubAckKeys are the acknowledgement's keys the hand-written reader takes.
var pubAckKeys = keyBits("stream", "seq", "domain", "duplicate")

// parsePubAck returns the stream sequence a publish was stored at, or the
// server's refusal as a [*jetstream.APIError] (so [IsRevisionMismatch]
// reads a lost compare-and-set as it reads nats.go's).
func parsePubAck(data []byte) (uint64, error) {
	if _, seq, _, _, err := scanPubAck(data); err == nil {
		return seq, nil
	}
	ack, err := decodePubAck(data)
	return ack.Sequence, err
}

// readPubAck returns a publish's whole acknowledgement (stream, sequence,
// duplicate flag, domain), or the server's refusal as a
// [*jetstream.APIError], as nats.go's publish returns them. names turns
// the stream's name into a string without a copy per acknowledgement.
func readPubAck(data []byte, names *streamNames) (jetstream.PubAck, error) {
	stream, seq, duplicate, domain, err := scanPubAck(data)
	if err != nil {
		return decodePubAck(data)
	}
	ack := jetstream.PubAck{Stream: names.get(stream), Sequence: seq, Duplicate: duplicate}
	if len(domain) > 0 {
		ack.Domain = string(domain)
	}
	return ack, nil
}

// decodePubAck reads an acknowledgement with encoding/json.
func decodePubAck(data []byte) (jetstream.PubAck, error) {
	var ack struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return jetstream.PubAck{}, fmt.Errorf("read publish acknowledgement: %w", err)
	}
	if ack.Error != nil {
		return jetstream.PubAck{}, ack.Error
	}
	if ack.Stream == "" {
		return jetstream.PubAck{}, errors.New("read publish acknowledgement: it names no stream")
	}
	return ack.PubAck, nil
}

// scanPubAck reads an acknowledgement in the form the server writes: the
// stream's name and the domain (views into data), the sequence and the
// duplicate flag. Any other form is errSlow.
func scanPubAck(data []byte) (stream []byte, seq uint64, duplicate bool, domain []byte, err error) {
	s := scanner{b: data}
	err = s.object(pubAckKeys, func(key []byte) error {
		var err error
		switch string(key) {
		case "stream":
			stream, err = s.str()
		case "seq":
			seq, err = s.uint()
		case "domain":
			domain, err = s.str()
		case "duplicate":
			duplicate, err = s.bool()
		}
		return err
	})
	if err != nil || len(stream) == 0 {
		return nil, 0, false, nil, errSlow
	}
	s.skipSpace()
	if s.i != len(s.b) {
		return nil, 0, false, nil, errSlow
	}
	return stream, seq, duplicate, domain, nil
}

// maxStreamNames bounds the stream names a [streamNames] keeps.
const maxStreamNames = 64

// streamNames keeps the stream names acknowledgements have named, so that
// reading one costs no string: a deployment's submits go to a few streams.
// It is safe for concurrent use; a nil one copies every name.
type streamNames struct {
	mu    sync.Mutex               // held to add a name
	names atomic.Pointer[[]string] // read without mu; replaced, never changed
}

// get returns name as a string, the kept one when there is one.
func (n *streamNames) get(name []byte) string {
	if n == nil {
		return string(name)
	}
	if names := n.names.Load(); names != nil {
		for _, known := range *names {
			if known == string(name) {
				return known
			}
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	if p := n.names.Load(); p != nil {
		names = *p
	}
	for _, known := range names { // added meanwhile
		if known == string(name) {
			return known
		}
	}
	if len(names) >= maxStreamNames {
		return string(name)
	}
	next := append(append(make([]string, 0, len(names)+1), names...), string(name))
	n.names.Store(&next)
	return next[len(next)-1]
}
