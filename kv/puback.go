package kv

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// A record write is a publish whose reply is JetStream's publish
// acknowledgement. nats.go's asynchronous publish reads each one with
// encoding/json (and keeps a future with two channels per publish); the
// task path writes two records per task, so the store sends its writes as
// requests and reads their replies here, by hand. The reader takes the
// flat acknowledgement the server writes, {"stream":…,"seq":…} with
// "domain" or "duplicate"; anything else (an error, a field it does not
// know) goes to encoding/json, as nats.go reads it.

// pubAckKeys are the acknowledgement's keys the hand-written reader takes.
var pubAckKeys = keyBits("stream", "seq", "domain", "duplicate")

// parsePubAck returns the stream sequence a publish was stored at, or the
// server's refusal as a [*jetstream.APIError] (so [IsRevisionMismatch]
// reads a lost compare-and-set as it reads nats.go's).
func parsePubAck(data []byte) (uint64, error) {
	if seq, err := scanPubAck(data); err == nil {
		return seq, nil
	}
	var ack struct {
		Error  *jetstream.APIError `json:"error,omitempty"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return 0, fmt.Errorf("read publish acknowledgement: %w", err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Stream == "" {
		return 0, errors.New("read publish acknowledgement: it names no stream")
	}
	return ack.Seq, nil
}

// scanPubAck reads an acknowledgement in the form the server writes; any
// other form is errSlow.
func scanPubAck(data []byte) (uint64, error) {
	s := scanner{b: data}
	var seq uint64
	var stream bool
	err := s.object(pubAckKeys, func(key []byte) error {
		var err error
		switch string(key) {
		case "stream":
			var v []byte
			v, err = s.str()
			stream = len(v) > 0
		case "seq":
			seq, err = s.uint()
		case "domain":
			_, err = s.str()
		case "duplicate":
			_, err = s.bool()
		}
		return err
	})
	if err != nil || !stream {
		return 0, errSlow
	}
	s.skipSpace()
	if s.i != len(s.b) {
		return 0, errSlow
	}
	return seq, nil
}
