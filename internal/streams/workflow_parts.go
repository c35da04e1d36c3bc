package streams

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A workflow document larger than one message is stored in parts, in one
// JetStream atomic batch (nats-server 2.12+): its parts on
// "<prefix>.submit.wf.<tenant>.<id>.part", then the commit, the document's
// message on "….doc", with an empty body and the headers below. The
// server stores none of it unless the commit arrives, and stores a batch
// at consecutive sequences, so the parts of a document are the
// WorkflowPartsHeader messages just before it (docs/WIRE.md).
const (
	// WorkflowPartsHeader, on a document's message, is the count of its
	// parts (1..MaxWorkflowParts); absent, the message is the document.
	WorkflowPartsHeader = "Ax-Workflow-Parts"
	// WorkflowDigestHeader, on a document's message, is the SHA-256 of the
	// whole document: "SHA-256=" and its unpadded base64url.
	WorkflowDigestHeader = "Ax-Workflow-Digest"
	// WorkflowPartHeader, on a part, is its number, 1 for the first.
	WorkflowPartHeader = "Ax-Workflow-Part"
	// MaxWorkflowDocument bounds a workflow's document, parts put
	// together (ax.MaxWorkflowBytes).
	MaxWorkflowDocument = 16 << 20
	// MaxWorkflowParts is the most parts one document is split into: the
	// server's default max_batch_size (1,000) less the commit.
	MaxWorkflowParts = 999
)

// ErrWorkflowParts means a document's parts are missing or do not match
// its commit (count, order, digest, size): it is no workflow, and nothing
// of it runs.
var ErrWorkflowParts = errors.New("workflow document parts do not match their commit")

// WorkflowPartSubject returns the subject of the parts of tenant's
// workflow id's document, "ax.submit.wf.<tenant>.<id>.part".
func (n Names) WorkflowPartSubject(tenant, id string) string {
	return n.Prefix() + ".submit." + WorkflowToken + "." + tenant + "." + id + ".part"
}

// WorkflowPartFilter returns the subjects of documents' parts,
// "ax.submit.wf.*.*.part".
func (n Names) WorkflowPartFilter() string {
	return n.Prefix() + ".submit." + WorkflowToken + ".*.*.part"
}

// WorkflowDigest returns the value of [WorkflowDigestHeader] for doc.
func WorkflowDigest(doc []byte) string {
	sum := sha256.Sum256(doc)
	return "SHA-256=" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// SplitWorkflowDocument cuts doc into parts of at most size bytes.
func SplitWorkflowDocument(doc []byte, size int) [][]byte {
	var parts [][]byte
	for len(doc) > 0 {
		n := min(size, len(doc))
		parts = append(parts, doc[:n])
		doc = doc[n:]
	}
	return parts
}

// WorkflowDocument returns the document stored by the message at seq of
// stream (AX_WORKFLOWS) with subject, header and data: data itself, or,
// when the header names parts, the parts read from the sequences just
// before it, put together and checked against the commit's count and
// digest. An error matching [ErrWorkflowParts] means the parts are not
// there or do not match (nothing of it is a workflow); another is a read
// that failed (try again).
func (n Names) WorkflowDocument(ctx context.Context, stream jetstream.Stream, seq uint64, subject string, header nats.Header, data []byte) ([]byte, error) {
	count := header.Get(WorkflowPartsHeader)
	if count == "" {
		return data, nil
	}
	bad := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("%w: %s #%d: %s", ErrWorkflowParts, subject, seq, fmt.Sprintf(format, args...))
	}
	parts, err := strconv.Atoi(count)
	if err != nil || parts < 1 || parts > MaxWorkflowParts || uint64(parts) >= seq {
		return bad("%s %q is not a count of parts in 1..%d before it", WorkflowPartsHeader, count, MaxWorkflowParts)
	}
	if len(data) > 0 {
		return bad("the commit of a document in parts has a body (%d bytes)", len(data))
	}
	partSubject := strings.TrimSuffix(subject, ".doc") + ".part"
	var doc bytes.Buffer
	for k := 1; k <= parts; k++ {
		at := seq - uint64(parts) - 1 + uint64(k)
		msg, err := stream.GetMsg(ctx, at)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return bad("part %d of %d (#%d) is not stored", k, parts, at)
		case err != nil:
			return nil, fmt.Errorf("read part %d of %s #%d: %w", k, subject, seq, err)
		case msg.Subject != partSubject || msg.Header.Get(WorkflowPartHeader) != strconv.Itoa(k):
			return bad("#%d is not part %d on %s (it is %s, part %q)", at, k, partSubject, msg.Subject, msg.Header.Get(WorkflowPartHeader))
		case doc.Len()+len(msg.Data) > MaxWorkflowDocument:
			return bad("its parts exceed the %d bytes a document holds", MaxWorkflowDocument)
		}
		doc.Write(msg.Data)
	}
	if got, want := WorkflowDigest(doc.Bytes()), header.Get(WorkflowDigestHeader); got != want {
		return bad("its parts' digest is %s, the commit names %q", got, want)
	}
	return doc.Bytes(), nil
}
