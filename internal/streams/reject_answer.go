package streams

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// AnswerRejected answers a request published on a subject no priority
// bucket accepts (a JetStream publish waiting for its ack) with a JetStream
// API error naming subject and why (detail), which JetStream clients return
// as the publish error. A message that is not a request is left alone.
func AnswerRejected(m *nats.Msg, subject, detail string) {
	if m.Reply == "" {
		return
	}
	var body struct {
		Error struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	body.Error.Code = 400
	body.Error.Description = fmt.Sprintf("ax: no priority bucket accepts subject %q: %s; the message was not stored (docs/WIRE.md)", subject, detail)
	data, _ := json.Marshal(&body)
	_ = m.Respond(data)
}
