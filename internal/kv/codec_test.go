package kv

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomRecord fills every field, or leaves it zero, at random; strings
// include quotes, backslashes, control characters, HTML characters,
// non-ASCII and invalid UTF-8.
func randomRecord(r *rand.Rand) *Record {
	strs := []string{"", "a", "task-01", `quo"te`, `back\slash`, "line\nbreak", "tab\t", "<html>&", "héllo ✓", "\xff\xfe", "\u2028", strings.Repeat("x", 300)}
	str := func() string { return strs[r.IntN(len(strs))] }
	ts := func() time.Time {
		return time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC()
	}
	tp := func() *time.Time {
		if r.IntN(2) == 0 {
			return nil
		}
		t := ts()
		return &t
	}
	rec := &Record{
		ID: str(), Type: str(), Tenant: str(), Key: str(), Priority: r.IntN(5) - 1, State: State(str()),
		Attempt: r.IntN(100), MaxAttempts: r.IntN(100), Timeout: Duration(r.Int64N(1e12)), Core: r.IntN(2) == 0,
		Deadline: tp(), RunAt: tp(), Gen: r.Uint64() >> r.IntN(64), Worker: str(), Delivery: r.Uint64() >> r.IntN(64),
		Stream: str(), StreamSeq: r.Uint64() >> r.IntN(64), Lost: r.IntN(3), Burying: str(),
		CreatedAt: ts(), UpdatedAt: ts(), StartedAt: tp(), FinishedAt: tp(), LastError: str(), DLQSeq: r.Uint64() >> r.IntN(64),
	}
	if r.IntN(2) == 0 {
		percents := []float64{0, 100, 42.5, 1e-7, 1.0 / 3, 99.99999, 1e22, -0.5}
		rec.Progress = &Progress{Percent: percents[r.IntN(len(percents))], Note: str(), At: ts()}
	}
	if n := r.IntN(4); n > 0 {
		rec.Result = make([]byte, r.IntN(70))
		for i := range rec.Result {
			rec.Result[i] = byte(r.IntN(256))
		}
	}
	if n := r.IntN(5); n > 0 {
		rec.Trail = []Move{}
		for range n - 1 {
			rec.Trail = append(rec.Trail, Move{Task: str(), From: State(str()), To: State(str()), Worker: str(), At: ts(),
				Took: Duration(r.Int64N(1e10) - 1e9), Error: str(), Action: str(), TimedOut: r.IntN(2) == 0})
		}
	}
	return rec
}

// The hand-written codec writes what encoding/json writes, byte for byte,
// and reads back what encoding/json reads, for records with every field
// set or zero and strings of every kind (2,000 random records in the fast
// tier, 20,000 in the whole suite).
func TestRecordCodecMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	for range n {
		rec := randomRecord(r)
		want, err := json.Marshal((*plainRecord)(rec))
		require.NoError(t, err)
		got := encodeRecord(rec)
		require.Equal(t, string(want), string(got))

		var std, fast Record
		require.NoError(t, json.Unmarshal(want, (*plainRecord)(&std)))
		require.NoError(t, decodeRecord(got, &fast))
		require.Equal(t, std, fast)
		var viaMethod Record
		require.NoError(t, json.Unmarshal(got, &viaMethod))
		require.Equal(t, std, viaMethod)
	}
}

// What the hand-written reader does not take (other spacing and key order
// it does take) is read by encoding/json, to the same value.
func TestRecordCodecReadsOtherJSON(t *testing.T) {
	docs := []string{
		`{"id":"a","state":"READY","trail":[]}`,
		` { "trail" : [ { "to" : "READY" , "at" : "2026-01-02T03:04:05Z" } ] , "id" : "a" } `,
		`{"ID":"a","State":"READY"}`,                          // encoding/json matches keys without case
		`{"id":"a","deadline":null,"trail":null}`,             // nulls
		`{"id":"\u0061b","last_error":"x\"y"}`,                // escapes
		`{"id":"a","extra":{"nested":[1,2,3]},"gen":7}`,       // unknown keys
		`{"id":"a","id":"b"}`,                                 // repeated key: the last wins
		`{"id":"a","timeout":1500000000}`,                     // a duration as nanoseconds
		`{"id":"a","created_at":"2026-01-02T03:04:05+01:00"}`, // an offset
		`{"id":"a","priority":-3,"gen":18446744073709551615}`,
		`{"id":"a","result":"aGk=","progress":{"percent":50,"note":"half","at":"2026-01-02T03:04:05Z"}}`,
		`{"id":"a","result":"","progress":null}`,
		`{"id":"a","progress":{"percent":1e2,"extra":1}}`,
	}
	for _, doc := range docs {
		var std, fast Record
		require.NoError(t, json.Unmarshal([]byte(doc), (*plainRecord)(&std)), doc)
		require.NoError(t, decodeRecord([]byte(doc), &fast), doc)
		require.Equal(t, std, fast, doc)
	}
	for _, bad := range []string{`{"id":`, `{"priority":"x"}`, `{"gen":-1}`, `[]`, `{"id":"a"} x`} {
		var std, fast Record
		stdErr := json.Unmarshal([]byte(bad), (*plainRecord)(&std))
		require.Error(t, stdErr, bad)
		require.Error(t, decodeRecord([]byte(bad), &fast), bad)
	}
}

func BenchmarkRecordCodec(b *testing.B) {
	now := time.Now().UTC()
	rec := &Record{ID: "01JTASKIDXXXXXXXXXXXXXXXX", Type: "noop", Tenant: "default", Key: "k", Priority: 2, State: StateRunning,
		Attempt: 1, MaxAttempts: 3, Timeout: Duration(time.Minute), Gen: 1, Worker: "w-1", Delivery: 1, Stream: "AX_P2", StreamSeq: 12345,
		CreatedAt: now, UpdatedAt: now, StartedAt: &now,
		Trail: []Move{{Task: "01JTASKIDXXXXXXXXXXXXXXXX", To: StateReady, At: now, Action: "submit"},
			{Task: "01JTASKIDXXXXXXXXXXXXXXXX", From: StateReady, To: StateRunning, Worker: "w-1", At: now, Took: Duration(time.Millisecond), Action: "claim"}}}
	data := encodeRecord(rec)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, _ := json.Marshal((*plainRecord)(rec))
			var back plainRecord
			_ = json.Unmarshal(out, &back)
		}
	})
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out := encodeRecord(rec)
			var back Record
			_ = decodeRecord(out, &back)
		}
	})
	_ = data
}

// Every JSON key of Record and Move is one the hand-written codec writes
// and reads: a field added to either without the codec would otherwise be
// dropped on every write (trail moves lost their timed_out this way).
func TestRecordCodecKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		keys map[string]uint
	}{{reflect.TypeFor[Record](), recordKeys}, {reflect.TypeFor[Move](), moveKeys}} {
		for f := range c.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			_, ok := c.keys[name]
			require.True(t, ok, "%s.%s (json %q) is not in the codec", c.typ.Name(), f.Name, name)
		}
	}
}
