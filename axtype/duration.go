package axtype

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a [time.Duration] that reads and writes JSON as "1.5s".
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"1.5s\"", b)
	}
	*d = Duration(n)
	return nil
}

// String formats d like [time.Duration].
func (d Duration) String() string { return time.Duration(d).String() }
