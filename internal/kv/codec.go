package kv

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The task path encodes and decodes a record several times per task; with
// encoding/json's reflection that was about a quarter of a worker's CPU
// (docs/BENCHMARKS.md). These functions write and read the same JSON by
// hand. The reader takes only what the writer writes (keys in any order,
// no escapes, no nulls); anything else is read by encoding/json, so every
// record that encoding/json reads is still read, to the same value.

// plainRecord has Record's fields and tags without its methods: what
// encoding/json reads and writes when the hand-written path does not.
type plainRecord Record

// MarshalJSON writes r as the JSON of docs/WIRE.md.
func (r *Record) MarshalJSON() ([]byte, error) { return encodeRecord(r), nil }

// UnmarshalJSON reads a record written by [Record.MarshalJSON], or any JSON
// that encoding/json reads into a Record's fields.
func (r *Record) UnmarshalJSON(data []byte) error {
	fast := *r
	if err := fast.decode(data); err == nil {
		*r = fast
		return nil
	}
	return json.Unmarshal(data, (*plainRecord)(r))
}

// encodeRecord is [Record.MarshalJSON] without encoding/json's check of the
// output.
func encodeRecord(r *Record) []byte {
	return r.appendJSON(make([]byte, 0, encodedSize(r)))
}

// encodedSize is a capacity that most records encode into without growth.
func encodedSize(r *Record) int {
	size := 480 + 240*len(r.Trail) + len(r.LastError) + len(r.Burying) + base64.StdEncoding.EncodedLen(len(r.Result))
	if r.Progress != nil {
		size += 80 + len(r.Progress.Note)
	}
	return size
}

// encodeBuffers hold the buffers of record writes ([Store.Apply]): a
// record is about a kilobyte, written twice per task, and its encoding is
// garbage as soon as it is published (nats.go copies it).
var encodeBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledEncodeBuffer is the largest buffer put back in encodeBuffers: a
// record with a large result or a long trail does not pin its buffer.
const maxPooledEncodeBuffer = 16 << 10

// getEncodeBuffer returns an empty buffer with room for r's encoding; give
// it back with putEncodeBuffer once nothing reads it.
func getEncodeBuffer(r *Record) *[]byte {
	buf := encodeBuffers.Get().(*[]byte)
	if size := encodedSize(r); cap(*buf) < size {
		*buf = make([]byte, 0, size)
	}
	*buf = (*buf)[:0]
	return buf
}

func putEncodeBuffer(buf *[]byte) {
	if cap(*buf) <= maxPooledEncodeBuffer {
		encodeBuffers.Put(buf)
	}
}

// decodeRecord is [Record.UnmarshalJSON] without encoding/json's scan of
// the input.
func decodeRecord(data []byte, r *Record) error {
	if err := r.decode(data); err == nil {
		return nil
	}
	*r = Record{}
	return json.Unmarshal(data, (*plainRecord)(r))
}

func (r *Record) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = appendStringField(b, "type", r.Type)
	b = appendStringField(b, "tenant", r.Tenant)
	b = appendStringField(b, "key", r.Key)
	b = appendIntField(b, "priority", int64(r.Priority))
	b = appendStringField(b, "state", string(r.State))
	b = appendIntField(b, "attempt", int64(r.Attempt))
	b = appendIntField(b, "max_attempts", int64(r.MaxAttempts))
	b = appendDurationField(b, "timeout", r.Timeout)
	if r.Core {
		b = append(b, `,"core":true`...)
	}
	b = appendTimePtr(b, "deadline", r.Deadline)
	b = appendTimePtr(b, "run_at", r.RunAt)
	b = append(b, `,"gen":`...)
	b = strconv.AppendUint(b, r.Gen, 10)
	if r.Worker != "" {
		b = appendStringField(b, "worker", r.Worker)
	}
	if r.Delivery != 0 {
		b = append(b, `,"delivery":`...)
		b = strconv.AppendUint(b, r.Delivery, 10)
	}
	if r.Stream != "" {
		b = appendStringField(b, "stream", r.Stream)
	}
	if r.StreamSeq != 0 {
		b = append(b, `,"stream_seq":`...)
		b = strconv.AppendUint(b, r.StreamSeq, 10)
	}
	if r.Lost != 0 {
		b = appendIntField(b, "lost", int64(r.Lost))
	}
	if r.Burying != "" {
		b = appendStringField(b, "burying", r.Burying)
	}
	b = appendTime(b, "created_at", r.CreatedAt)
	b = appendTime(b, "updated_at", r.UpdatedAt)
	b = appendTimePtr(b, "started_at", r.StartedAt)
	b = appendTimePtr(b, "finished_at", r.FinishedAt)
	if r.LastError != "" {
		b = appendStringField(b, "last_error", r.LastError)
	}
	if r.DLQSeq != 0 {
		b = append(b, `,"dlq_seq":`...)
		b = strconv.AppendUint(b, r.DLQSeq, 10)
	}
	if p := r.Progress; p != nil {
		b = append(b, `,"progress":{"percent":`...)
		b = appendFloat(b, p.Percent)
		if p.Note != "" {
			b = appendStringField(b, "note", p.Note)
		}
		b = appendTime(b, "at", p.At)
		b = append(b, '}')
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.Result)
		b = append(b, '"')
	}
	if r.Trail == nil {
		return append(b, `,"trail":null}`...)
	}
	b = append(b, `,"trail":[`...)
	for i := range r.Trail {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.Trail[i].appendJSON(b)
	}
	return append(b, "]}"...)
}

func (m *Move) appendJSON(b []byte) []byte {
	b = append(b, `{"task":`...)
	b = appendString(b, m.Task)
	if m.From != "" {
		b = appendStringField(b, "from", string(m.From))
	}
	b = appendStringField(b, "to", string(m.To))
	if m.Worker != "" {
		b = appendStringField(b, "worker", m.Worker)
	}
	b = appendTime(b, "at", m.At)
	if m.Took != 0 {
		b = appendDurationField(b, "took", m.Took)
	}
	if m.Error != "" {
		b = appendStringField(b, "error", m.Error)
	}
	if m.Action != "" {
		b = appendStringField(b, "action", m.Action)
	}
	if m.TimedOut {
		b = append(b, `,"timed_out":true`...)
	}
	if m.Note != "" {
		b = appendStringField(b, "note", m.Note)
	}
	return append(b, '}')
}

func appendStringField(b []byte, name, s string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, s)
}

// appendDurationField writes d as "1.5s" (its String form: digits, '.',
// '-' and unit letters, none of which JSON escapes), without the string's
// allocation.
func appendDurationField(b []byte, name string, d Duration) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, time.Duration(d).String()...)
	return append(b, '"')
}

func appendIntField(b []byte, name string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendFloat writes f as encoding/json does (its floatEncoder); f must be
// finite.
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func appendTime(b []byte, name string, t time.Time) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendTimePtr(b []byte, name string, t *time.Time) []byte {
	if t == nil {
		return b
	}
	return appendTime(b, name, *t)
}

// appendString writes s quoted; strings that need escaping (quotes,
// backslashes, control characters, HTML characters, non-ASCII) are written
// by encoding/json, so the output is what it writes.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// errSlow sends a record to encoding/json.
var errSlow = errors.New("record: not in the hand-written form")

// scanner reads the JSON that appendJSON writes.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes (a view into the input).
func (s *scanner) str() ([]byte, error) {
	if !s.consume('"') {
		return nil, errSlow
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, nil
		case c == '\\' || c < 0x20:
			return nil, errSlow
		}
		s.i++
	}
	return nil, errSlow
}

func (s *scanner) text() (string, error) {
	v, err := s.str()
	if err != nil || !utf8.Valid(v) {
		return "", errSlow
	}
	return string(v), nil
}

// textOr reads a string, and returns known when the string equals it
// (without a copy).
func (s *scanner) textOr(known string) (string, error) {
	v, err := s.str()
	if err != nil {
		return "", err
	}
	if known != "" && string(v) == known {
		return known, nil
	}
	if !utf8.Valid(v) {
		return "", errSlow
	}
	return string(v), nil
}

// state reads a state name; the known ones cost no allocation.
func (s *scanner) state() (State, error) {
	v, err := s.str()
	if err != nil {
		return "", err
	}
	for _, st := range knownStates {
		if string(st) == string(v) {
			return st, nil
		}
	}
	if !utf8.Valid(v) {
		return "", errSlow
	}
	return State(v), nil
}

var knownStates = States()

func (s *scanner) uint() (uint64, error) {
	s.skipSpace()
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == start || s.i-start > 19 || (s.b[start] == '0' && s.i-start > 1) {
		return 0, errSlow
	}
	return strconv.ParseUint(string(s.b[start:s.i]), 10, 64)
}

func (s *scanner) int() (int, error) {
	s.skipSpace()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	v, err := s.uint()
	if err != nil || v > 1<<62 {
		return 0, errSlow
	}
	if neg {
		return -int(v), nil
	}
	return int(v), nil
}

func (s *scanner) bool() (bool, error) {
	s.skipSpace()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, nil
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, nil
	}
	return false, errSlow
}

func (s *scanner) time() (time.Time, error) {
	v, err := s.str()
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, string(v))
	if err != nil {
		return time.Time{}, errSlow
	}
	return t, nil
}

func (s *scanner) timePtr() (*time.Time, error) {
	t, err := s.time()
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func (s *scanner) duration() (Duration, error) {
	v, err := s.str()
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(string(v))
	if err != nil {
		return 0, errSlow
	}
	return Duration(d), nil
}

// object calls field for each key of an object; field reads the value. A
// key seen twice goes to encoding/json (keys holds one bit per known key).
func (s *scanner) object(keys map[string]uint, field func(key []byte) error) error {
	var seen uint32
	if !s.consume('{') {
		return errSlow
	}
	if s.consume('}') {
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		bit, ok := keys[string(key)]
		if !ok || seen&(1<<bit) != 0 {
			return errSlow
		}
		seen |= 1 << bit
		if !s.consume(':') {
			return errSlow
		}
		if err := field(key); err != nil {
			return errSlow
		}
		if s.consume('}') {
			return nil
		}
		if !s.consume(',') {
			return errSlow
		}
	}
}

func (r *Record) decode(data []byte) error {
	s := &scanner{b: data}
	var err error
	err = s.object(recordKeys, func(key []byte) error {
		switch string(key) {
		case "id":
			r.ID, err = s.text()
		case "type":
			r.Type, err = s.text()
		case "tenant":
			r.Tenant, err = s.text()
		case "key":
			r.Key, err = s.text()
		case "priority":
			r.Priority, err = s.int()
		case "state":
			r.State, err = s.state()
		case "attempt":
			r.Attempt, err = s.int()
		case "max_attempts":
			r.MaxAttempts, err = s.int()
		case "timeout":
			r.Timeout, err = s.duration()
		case "core":
			r.Core, err = s.bool()
		case "deadline":
			r.Deadline, err = s.timePtr()
		case "run_at":
			r.RunAt, err = s.timePtr()
		case "gen":
			r.Gen, err = s.uint()
		case "worker":
			r.Worker, err = s.text()
		case "delivery":
			r.Delivery, err = s.uint()
		case "stream":
			r.Stream, err = s.text()
		case "stream_seq":
			r.StreamSeq, err = s.uint()
		case "lost":
			r.Lost, err = s.int()
		case "burying":
			r.Burying, err = s.text()
		case "created_at":
			r.CreatedAt, err = s.time()
		case "updated_at":
			r.UpdatedAt, err = s.time()
		case "started_at":
			r.StartedAt, err = s.timePtr()
		case "finished_at":
			r.FinishedAt, err = s.timePtr()
		case "last_error":
			r.LastError, err = s.text()
		case "dlq_seq":
			r.DLQSeq, err = s.uint()
		case "progress":
			r.Progress, err = s.progress()
		case "result":
			r.Result, err = s.bytes()
		case "trail":
			r.Trail, err = s.trail(r.ID)
		default:
			return errSlow
		}
		return err
	})
	if err != nil {
		return errSlow
	}
	if s.skipSpace(); s.i != len(s.b) {
		return errSlow
	}
	return nil
}

func keyBits(names ...string) map[string]uint {
	m := make(map[string]uint, len(names))
	for i, n := range names {
		m[n] = uint(i)
	}
	return m
}

var (
	recordKeys = keyBits("id", "type", "tenant", "key", "priority", "state", "attempt", "max_attempts", "timeout", "core",
		"deadline", "run_at", "gen", "worker", "delivery", "stream", "stream_seq", "lost", "burying", "created_at",
		"updated_at", "started_at", "finished_at", "last_error", "dlq_seq", "progress", "result", "trail")
	progressKeys = keyBits("percent", "note", "at")
	moveKeys     = keyBits("task", "from", "to", "worker", "at", "took", "error", "action", "timed_out", "note")
)

// float reads a JSON number.
func (s *scanner) float() (float64, error) {
	s.skipSpace()
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			break
		}
		s.i++
	}
	if s.i == start {
		return 0, errSlow
	}
	f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	if err != nil {
		return 0, errSlow
	}
	return f, nil
}

// bytes reads base64 as encoding/json does for a []byte (standard
// alphabet, padded).
func (s *scanner) bytes() ([]byte, error) {
	v, err := s.str()
	if err != nil {
		return nil, err
	}
	out, err := base64.StdEncoding.AppendDecode(nil, v)
	if err != nil {
		return nil, errSlow
	}
	if len(out) == 0 {
		return []byte{}, nil
	}
	return out, nil
}

func (s *scanner) progress() (*Progress, error) {
	if s.skipSpace(); len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		return nil, errSlow
	}
	var p Progress
	var err error
	err = s.object(progressKeys, func(key []byte) error {
		switch string(key) {
		case "percent":
			p.Percent, err = s.float()
		case "note":
			p.Note, err = s.text()
		case "at":
			p.At, err = s.time()
		default:
			return errSlow
		}
		return err
	})
	if err != nil {
		return nil, errSlow
	}
	return &p, nil
}

// trail reads a record's trail; id is the record's id, if read already,
// which each move names (and then shares, rather than a copy each).
func (s *scanner) trail(id string) ([]Move, error) {
	if s.skipSpace(); len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return nil, nil
	}
	if !s.consume('[') {
		return nil, errSlow
	}
	moves := make([]Move, 0, 4)
	if s.consume(']') {
		return moves, nil
	}
	for {
		var m Move
		var err error
		err = s.object(moveKeys, func(key []byte) error {
			switch string(key) {
			case "task":
				m.Task, err = s.textOr(id)
			case "from":
				m.From, err = s.state()
			case "to":
				m.To, err = s.state()
			case "worker":
				m.Worker, err = s.text()
			case "at":
				m.At, err = s.time()
			case "took":
				m.Took, err = s.duration()
			case "error":
				m.Error, err = s.text()
			case "action":
				m.Action, err = s.text()
			case "timed_out":
				m.TimedOut, err = s.bool()
			case "note":
				m.Note, err = s.text()
			default:
				return errSlow
			}
			return err
		})
		if err != nil {
			return nil, errSlow
		}
		moves = append(moves, m)
		if s.consume(']') {
			return moves, nil
		}
		if !s.consume(',') {
			return nil, errSlow
		}
	}
}
