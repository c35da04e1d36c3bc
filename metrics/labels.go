package metrics

// OtherLabel is the label value under which the task types or tenants
// beyond [Config.MaxLabelValues] are counted, and the unserved types beyond
// it reported.
const OtherLabel = "_other"

// DefaultMaxLabelValues is how many task types, and how many tenants, keep
// a label value of their own by default.
const DefaultMaxLabelValues = 100

// labelBound bounds the values of one label whose values a producer
// chooses (a task type, a tenant): at most max values keep their own
// label, the busiest; the others are reported as [OtherLabel]. A value
// not kept is promoted, and the least busy kept value dropped (its series
// deleted through drop), once its events are more than twice that value's.
// Events are counted for the kept values and for at most 4 x max others
// (the least busy of those is forgotten to make room), so the memory is
// bounded too. Its methods are called with the metrics' mutex held.
type labelBound struct {
	max  int               // values kept; -1: no bound
	kept map[string]uint64 // kept value -> events
	seen map[string]uint64 // other values -> events, at most 4 x max
	drop func(value string)
}

func newLabelBound(max int, drop func(string)) *labelBound {
	return &labelBound{max: max, kept: map[string]uint64{}, seen: map[string]uint64{}, drop: drop}
}

// value counts an event of v and returns the label value to report it
// under: v, or [OtherLabel].
func (b *labelBound) value(v string) string {
	if b.max < 0 {
		return v
	}
	if n, ok := b.kept[v]; ok {
		b.kept[v] = n + 1
		return v
	}
	n := b.seen[v] + 1
	if len(b.kept) < b.max {
		delete(b.seen, v)
		b.kept[v] = n
		return v
	}
	if _, ok := b.seen[v]; !ok && len(b.seen) >= 4*b.max {
		delete(b.seen, least(b.seen))
	}
	low := least(b.kept)
	if low == "" || n <= 2*b.kept[low] {
		b.seen[v] = n
		return OtherLabel
	}
	b.seen[low] = b.kept[low]
	delete(b.kept, low)
	delete(b.seen, v)
	b.kept[v] = n
	b.drop(low)
	return v
}

// least returns the key with the fewest events ("" for an empty map).
func least(m map[string]uint64) string {
	key, fewest := "", uint64(0)
	for k, n := range m {
		if key == "" || n < fewest || (n == fewest && k < key) {
			key, fewest = k, n
		}
	}
	return key
}
