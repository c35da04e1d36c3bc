package ax

import (
	"strings"
	"time"
)

// CronJobName returns the job name of a control bucket key ("cron.<name>"),
// and whether the key is a cron job's.
func CronJobName(key string) (string, bool) { return strings.CutPrefix(key, CronKeyPrefix) }

// Upcoming returns the next n times after t that the job's Spec names, read
// as the leader reads it (UTC); fewer when the spec names no more.
func (j *CronJob) Upcoming(after time.Time, n int) ([]time.Time, error) {
	sched, err := j.Schedule()
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, 0, n)
	at := after
	for range n {
		if at = sched.Next(at); at.IsZero() {
			break
		}
		out = append(out, at)
	}
	return out, nil
}
