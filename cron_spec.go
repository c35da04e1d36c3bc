package ax

import (
	"strings"
	"time"

	"github.com/ax-mesh/ax/control"
)

// CronJobName returns the job name of a control bucket key ("cron.<name>"),
// and whether the key is a cron job's.
func CronJobName(key string) (string, bool) { return strings.CutPrefix(key, control.CronKeyPrefix) }

// CronMaxCatchUp is how many missed times of one job the leader fires when
// it finds them due at once (after a time without a leader); it skips the
// rest, to the first time after now.
const CronMaxCatchUp = 1000

// ScheduleFrom returns the time the leader counts the job's times from: its
// Last fired time, or CreatedAt when it never fired. The leader's next time
// is the first time Spec names after it.
func (j *CronJob) ScheduleFrom() time.Time {
	if j.Last.IsZero() {
		return j.CreatedAt
	}
	return j.Last
}

// Upcoming returns the next n times after t at which the leader fires the
// job, counted as the leader counts them: from [CronJob.ScheduleFrom], each
// the first time Spec names (in UTC) after the one before, so that an
// "@every 1h" job created at 12:00 runs at 13:00 and 14:00 whenever it is
// asked, not an hour after t. When more than [CronMaxCatchUp] times are
// due at t, the leader skips the rest, and so does this list. Fewer than n
// when the spec names no more.
func (j *CronJob) Upcoming(after time.Time, n int) ([]time.Time, error) {
	sched, err := j.Schedule()
	if err != nil {
		return nil, err
	}
	at := sched.Next(j.ScheduleFrom())
	for missed := 0; !at.IsZero() && !at.After(after); missed++ {
		if missed == CronMaxCatchUp {
			at = sched.Next(after.UTC())
			break
		}
		at = sched.Next(at)
	}
	out := make([]time.Time, 0, n)
	for ; len(out) < n && !at.IsZero(); at = sched.Next(at) {
		out = append(out, at)
	}
	return out, nil
}
