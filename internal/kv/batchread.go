package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxReadBatch is the most record reads one batched request asks for; the
// server answers at most 1,024 subjects per request.
const maxReadBatch = 256

// statusHeader and descriptionHeader hold a status reply's code and text
// (nats.go's names).
const (
	statusHeader      = "Status"
	descriptionHeader = "Description"
)

// numPendingHeader is the header of a batched direct get's reply that says
// how many of the matching messages are still to come.
const numPendingHeader = "Nats-Num-Pending"

// readTimeout bounds one batched read; a read that fails is done again on
// its own, with its caller's context.
const readTimeout = 5 * time.Second

// batchReader coalesces concurrent reads of the latest revision of keys
// (group commit, no timer): a read that finds no request in flight goes out
// at once, on its own, as a plain KV get; reads that arrive while one is in
// flight wait for it and then go out together as one direct get of the last
// message of each of their subjects (JetStream 2.11 `multi_last`), led by
// the first of them. So an idle process reads as it always did, and a busy
// one pays one request per batch instead of one per record.
//
// A batch is a read of each key at one point of the stream, as a single get
// of each would be; a caller decides nothing from it that a single get
// would not let it decide. A batch that fails, or is cut short by the
// server's byte limit, leaves its callers to read alone.
type batchReader struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	api    string // the batched read's subject: $JS.API.DIRECT.GET.KV_<bucket>
	prefix string // "$KV.<bucket>."
	test   *ReadTestHooks

	// The reply subscription, made by the first batch, and the number of
	// the last request; used by one request at a time (busy).
	sub     *nats.Subscription
	inbox   string
	replies chan *nats.Msg
	seq     uint64

	alone atomic.Bool // the server cannot batch: every read goes alone

	mu    sync.Mutex
	busy  bool        // a request is in flight (mu)
	queue []*readCall // reads waiting for the next batch, oldest first (mu)
}

// ReadTestHooks are test knobs of a [Store]'s reads.
type ReadTestHooks struct {
	// Batch, if set, is called with the keys of each read request before it
	// is sent: one key for a read that goes alone.
	Batch func(keys []string)
	// Answered, if set, is called with the keys of each batch of more than
	// one key that the server answered in full, before its callers see
	// their answers: a write it makes lands between their reads and
	// whatever they write next.
	Answered func(keys []string)
}

// readCall is one caller's read.
type readCall struct {
	key  string
	lead chan struct{} // closed when the call must send the next batch
	done chan struct{} // closed when data, rev and err are set

	data []byte
	rev  uint64
	err  error // ErrNotFound, errReadAlone, or the get's error
}

// errReadAlone tells a caller its batch did not answer for its key: read
// it on its own.
var errReadAlone = errors.New("read the record on its own")

func newBatchReader(js jetstream.JetStream, kv jetstream.KeyValue, bucket string, test *ReadTestHooks) *batchReader {
	return &batchReader{js: js, kv: kv, api: apiPrefix(js) + "DIRECT.GET." + StreamName(bucket), prefix: KeyPrefix(bucket), test: test}
}

// get returns the latest value of key and its revision, or [ErrNotFound]
// when the key has none (never written, deleted or expired).
func (b *batchReader) get(ctx context.Context, key string) ([]byte, uint64, error) {
	c := &readCall{key: key, lead: make(chan struct{}), done: make(chan struct{})}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		b.send(ctx, c)
		return c.result(ctx, b)
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
	case <-c.lead:
		b.send(ctx, c)
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			return nil, 0, ctx.Err()
		}
		b.mu.Unlock()
		// Taken into a batch, or chosen to send the next one: the batch
		// must go out either way (others wait for it).
		select {
		case <-c.done:
		case <-c.lead:
			b.send(ctx, c)
		}
	}
	return c.result(ctx, b)
}

// result is the call's answer, read alone when its batch did not give one.
func (c *readCall) result(ctx context.Context, b *batchReader) ([]byte, uint64, error) {
	if errors.Is(c.err, errReadAlone) {
		return b.single(ctx, c.key)
	}
	return c.data, c.rev, c.err
}

// send sends first's batch: first and the reads queued behind it, at most
// maxReadBatch; a batch of one is a plain get with first's context. Then it
// hands the next batch to the oldest read still waiting, or marks the
// reader idle.
func (b *batchReader) send(ctx context.Context, first *readCall) {
	b.mu.Lock()
	n := min(len(b.queue), maxReadBatch-1)
	batch := make([]*readCall, 0, n+1)
	batch = append(batch, first)
	batch = append(batch, b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()

	if b.test != nil && b.test.Batch != nil {
		keys := make([]string, len(batch))
		for i, c := range batch {
			keys[i] = c.key
		}
		b.test.Batch(keys)
	}
	if len(batch) == 1 || b.alone.Load() {
		for _, c := range batch[1:] {
			c.err = errReadAlone
			close(c.done)
		}
		first.data, first.rev, first.err = b.single(ctx, first.key)
		close(first.done)
	} else {
		b.multi(batch)
	}

	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	next := b.queue[0]
	b.queue = slices.Delete(b.queue, 0, 1)
	b.mu.Unlock()
	close(next.lead)
}

// single reads key with a plain KV get.
func (b *batchReader) single(ctx context.Context, key string) ([]byte, uint64, error) {
	entry, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	return entry.Value(), entry.Revision(), nil
}

// multi reads the batch's keys with one direct get of the last message of
// each subject and answers every call in it.
func (b *batchReader) multi(batch []*readCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	bySubject := make(map[string][]*readCall, len(batch))
	subjects := make([]string, 0, len(batch))
	for _, c := range batch {
		c.err = errReadAlone // until the batch answers for it
		subject := b.prefix + c.key
		if _, ok := bySubject[subject]; !ok {
			subjects = append(subjects, subject)
		}
		bySubject[subject] = append(bySubject[subject], c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	err := b.request(ctx, subjects, func(subject string, seq uint64, value []byte, present bool) {
		for _, c := range bySubject[subject] {
			if present {
				c.data, c.rev, c.err = value, seq, nil
			} else {
				c.err = ErrNotFound
			}
		}
	})
	if err != nil {
		return // failed or cut short: the keys it did not answer for are read alone
	}
	for _, c := range batch {
		if errors.Is(c.err, errReadAlone) {
			c.err = ErrNotFound // no message of its subject
		}
	}
	if b.test != nil && b.test.Answered != nil {
		keys := make([]string, len(batch))
		for i, c := range batch {
			keys[i] = c.key
		}
		b.test.Answered(keys)
	}
}

// errCutShort is a batched read the server ended before every matching
// message was sent (its byte limit).
var errCutShort = errors.New("batched read cut short")

// request sends one direct get of the last message of each subject and
// calls found for each message of the reply, until the end of the batch.
// It returns nil only when the server sent every message it found: a
// subject found did not name is then one with no message. Only one
// request is in flight at a time (the reader's busy flag), so replies
// share one subscription, told apart from a late reply to an earlier,
// timed-out request by the last token of their subject.
func (b *batchReader) request(ctx context.Context, subjects []string, found func(subject string, seq uint64, value []byte, present bool)) error {
	if b.sub == nil {
		b.inbox = b.js.Conn().NewRespInbox()
		b.replies = make(chan *nats.Msg, 2*maxReadBatch)
		sub, err := b.js.Conn().ChanSubscribe(b.inbox+".*", b.replies)
		if err != nil {
			return err
		}
		b.sub = sub
	}
	b.seq++
	reply := b.inbox + "." + strconv.FormatUint(b.seq, 10)
	body, err := json.Marshal(multiLastRequest{MultiLast: subjects})
	if err != nil {
		return err
	}
	if err := b.js.Conn().PublishRequest(b.api, reply, body); err != nil {
		return err
	}
	for {
		var msg *nats.Msg
		select {
		case msg = <-b.replies:
		case <-ctx.Done():
			return ctx.Err()
		}
		if msg.Subject != reply {
			continue // a late reply to an earlier request
		}
		if len(msg.Data) == 0 && msg.Header.Get(statusHeader) != "" {
			switch msg.Header.Get(statusHeader) {
			case "204": // end of batch, and how many found were left unsent
				if n := msg.Header.Get(numPendingHeader); n != "" && n != "0" {
					return errCutShort
				}
				return nil
			case "404": // none of the subjects has a message
				return nil
			default:
				return &statusError{status: msg.Header.Get(statusHeader), desc: msg.Header.Get(descriptionHeader)}
			}
		}
		subject := msg.Header.Get(jetstream.SubjectHeader)
		seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
		if subject == "" || err != nil {
			return fmt.Errorf("batched read: a reply without its subject or sequence")
		}
		value, present := liveValue(msg.Header, msg.Data)
		found(subject, seq, value, present)
	}
}

// statusError is a batched read the server answered with an error status.
type statusError struct{ status, desc string }

func (e *statusError) Error() string { return "batched read: status " + e.status + " " + e.desc }

// multiLastRequest is a direct get of the last message of each subject
// (JetStream 2.11).
type multiLastRequest struct {
	MultiLast []string `json:"multi_last"`
}

// liveValue is a KV entry's value, and false when the entry is a delete,
// purge or expiry marker, as a KV get reads it.
func liveValue(h nats.Header, data []byte) ([]byte, bool) {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return nil, false
	}
	if h.Get(jetstream.MarkerReasonHeader) != "" {
		return nil, false
	}
	return data, true
}

// probe asks the server for a batch of one key no task has: a server that
// answers it can batch; one that refuses the request (older than
// JetStream 2.11) makes every read go alone. An error is a request the
// server did not answer, such as one the user may not send.
func (b *batchReader) probe(ctx context.Context) error {
	b.mu.Lock() // no read may be in flight meanwhile: they share the reply subscription
	for b.busy {
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
		b.mu.Lock()
	}
	b.busy = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.busy = false
		b.mu.Unlock()
	}()
	err := b.request(ctx, []string{b.prefix + probeKey}, func(string, uint64, []byte, bool) {})
	var status *statusError
	if errors.As(err, &status) {
		b.alone.Store(true) // answered, but not as a batch: the server predates it
		return nil
	}
	return err
}

// probeKey is a key no task record has (a record's key is <tenant>.<id>).
const probeKey = "_ax_probe"

// apiPrefix is the JetStream API prefix of js, with its trailing dot.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	default:
		return "$JS.API."
	}
}
