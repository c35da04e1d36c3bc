package cli

import (
	"fmt"
	"time"
)

// priorityText writes a priority level the one way ax reads and prints
// it: p0 (highest) .. p4, as --priority takes it.
func priorityText(level int) string { return fmt.Sprintf("p%d", level) }

// durationText rounds d to three significant digits for people:
// 1.206036934s prints 1.21s, 12.3456ms prints 12.3ms; 0 prints 0s.
func durationText(d time.Duration) string {
	abs := d.Abs()
	unit := time.Nanosecond
	for _, u := range []struct{ above, round time.Duration }{
		{100 * time.Second, time.Second}, {10 * time.Second, 100 * time.Millisecond}, {time.Second, 10 * time.Millisecond},
		{100 * time.Millisecond, time.Millisecond}, {10 * time.Millisecond, 100 * time.Microsecond}, {time.Millisecond, 10 * time.Microsecond},
		{100 * time.Microsecond, time.Microsecond}, {10 * time.Microsecond, 100 * time.Nanosecond}, {time.Microsecond, 10 * time.Nanosecond},
	} {
		if abs >= u.above {
			unit = u.round
			break
		}
	}
	return d.Round(unit).String()
}
