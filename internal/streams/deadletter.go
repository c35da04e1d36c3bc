package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Letter is what a dead letter says of its task, besides the payload: its
// subject ("<prefix>.dlq.<tenant>.<type>") and its headers.
type Letter struct {
	TaskID string
	// Tenant and Type come from the letter's subject; empty when the
	// subject has another shape.
	Tenant string
	Type   string
	// Subject is the submit subject a replay publishes to
	// ([HeaderSubject]).
	Subject  string
	Error    string
	Attempts int
	FailedAt time.Time
}

// DeadLetterMsg builds the dead letter of a task's message: its payload and
// [KeptHeaders] with l's fields as headers, on [Names.DLQSubject] of l's
// tenant and type. msgID is the letter's Nats-Msg-Id, unique to this
// publish.
func (n Names) DeadLetterMsg(l Letter, data []byte, from nats.Header, msgID string) *nats.Msg {
	msg := nats.NewMsg(n.DLQSubject(l.Tenant, l.Type))
	msg.Data = data
	msg.Header = KeptHeaders(from)
	msg.Header.Set(HeaderError, l.Error)
	msg.Header.Set(HeaderAttempts, strconv.Itoa(l.Attempts))
	msg.Header.Set(HeaderFailedAt, l.FailedAt.UTC().Format(time.RFC3339Nano))
	msg.Header.Set(HeaderTaskID, l.TaskID)
	msg.Header.Set(HeaderSubject, l.Subject)
	msg.Header.Set(HeaderMsgID, msgID)
	return msg
}

// ParseDeadLetter reads a dead letter's subject and headers, as
// [Names.DeadLetterMsg] wrote them. Fields it cannot read stay zero.
func ParseDeadLetter(subject string, h nats.Header) Letter {
	l := Letter{TaskID: h.Get(HeaderTaskID), Subject: h.Get(HeaderSubject), Error: h.Get(HeaderError)}
	if tokens := strings.Split(subject, "."); len(tokens) == 4 {
		l.Tenant, l.Type = tokens[2], tokens[3]
	}
	l.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	l.FailedAt, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderFailedAt))
	return l
}

// ParseReplaySubject checks that a dead letter's [HeaderSubject] is a
// (non-core) submit subject "<prefix>.submit.p<N>.<tenant>.<type>.<key>"
// and returns its priority.
func (n Names) ParseReplaySubject(subject string) (int, error) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != 6 || tokens[0] != n.Prefix() || tokens[1] != "submit" {
		return 0, fmt.Errorf("its subject %q is not %s.submit.<priority>.<tenant>.<type>.<key>", subject, n.Prefix())
	}
	return ParsePriority(tokens[2])
}

// SalvageStored reads what it can of a stored subject that
// [Names.ParseStored] refused: of "<prefix>.p<N>.<shard>.<tenant>.<type>.<key>",
// each of tenant, type and key that is a valid token, "_invalid" for the
// others (and for all three when the subject has another shape), with the
// given priority, so that the message can still be dead-lettered.
func SalvageStored(subject string, priority int) Stored {
	s := Stored{Priority: priority, Tenant: "_invalid", Type: "_invalid", Key: "_invalid"}
	tokens := strings.Split(subject, ".")
	if len(tokens) == 6 {
		for i, dst := range []*string{&s.Tenant, &s.Type, &s.Key} {
			if ValidateToken("token", tokens[3+i]) == nil {
				*dst = tokens[3+i]
			}
		}
	}
	return s
}

// DeadLetterHeaders returns the headers a dead letter adds to its task's
// message (and the copy headers it may carry), which a re-dispatched copy
// of the letter (replay, recovery) drops.
func DeadLetterHeaders() []string {
	return []string{HeaderError, HeaderAttempts, HeaderFailedAt, HeaderSubject, HeaderTaskID, HeaderGen,
		HeaderWaitingSince, HeaderPayloadTruncated}
}

// PublishDeadLetter publishes a dead letter built by [Names.DeadLetterMsg]
// and returns its sequence in AX_DLQ. A letter too large for the server or
// the stream (the payload plus the letter's headers) is published again
// without its payload, marked with [HeaderPayloadTruncated] and the size
// it had, so that the task is dead-lettered rather than stuck.
func PublishDeadLetter(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) (uint64, error) {
	ack, err := js.PublishMsg(ctx, msg)
	if errors.Is(err, nats.ErrMaxPayload) || isTooLarge(err) {
		msg.Header.Set(HeaderPayloadTruncated, strconv.Itoa(len(msg.Data)))
		msg.Data = nil
		ack, err = js.PublishMsg(ctx, msg)
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func isTooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}
