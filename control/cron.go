package control

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrBadCronSpec means a cron job's Spec is not a cron line or descriptor.
var ErrBadCronSpec = errors.New("bad cron spec")

// cronParser reads 5-field (minute first) and 6-field (second first) cron
// specs and descriptors such as "@hourly" and "@every 10s".
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronJob is what AX_CONTROL holds under [CronKeyPrefix]+name: a periodic
// task. At every time its Spec names, the leader submits Task with the id
// "cron-<name>-<unix seconds>-<secret>", so each scheduled time yields
// exactly one task, across leader changes and restarts. T is the task's
// type, ax's TaskSpec (ax.CronJob is CronJob[ax.TaskSpec]): the client that
// writes a job and the leader that reads it use that one instance.
type CronJob[T any] struct {
	// Name of the job: letters, digits, '-' and '_'.
	Name string `json:"name"`
	// Spec: a cron line of 5 fields (minute hour dom month dow) or 6 fields
	// (second first), or a descriptor ("@hourly", "@every 30s"), in UTC.
	Spec string `json:"spec"`
	// Task to submit at each time; its ID, Key, RunAt and Delay are ignored
	// (the id derives from the name and time; the key is the id).
	Task T `json:"task"`
	// CreatedAt is when the job was first added.
	CreatedAt time.Time `json:"created_at"`
	// Last is the last scheduled time submitted (zero: none yet).
	Last time.Time `json:"last,omitzero"`
	// Next is the next scheduled time.
	Next time.Time `json:"next"`
	// Secret makes the job's task ids unguessable ("cron-<name>-<unix
	// seconds>-<secret>"): a producer cannot publish a task under the id of
	// a future fire, which would de-duplicate the real one away. Random,
	// written when the job is first added and kept when it is replaced.
	Secret string `json:"secret"`
}

// TaskID returns the id of the task the job submits for the scheduled time
// at.
func (j *CronJob[T]) TaskID(at time.Time) string {
	return fmt.Sprintf("cron-%s-%d-%s", j.Name, at.Unix(), j.Secret)
}

// NewCronSecret returns a new [CronJob.Secret]: 8 random bytes in hex. The
// leader gives one to a job stored before jobs had secrets.
func NewCronSecret() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Schedule parses the job's Spec (in UTC); a bad spec is [ErrBadCronSpec].
func (j *CronJob[T]) Schedule() (cron.Schedule, error) {
	s, err := cronParser.Parse(j.Spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadCronSpec, j.Spec, err)
	}
	return s, nil
}

// CronJobName returns the job name of a control bucket key ("cron.<name>"),
// and whether the key is a cron job's.
func CronJobName(key string) (string, bool) { return strings.CutPrefix(key, CronKeyPrefix) }

// CronMaxCatchUp is how many missed times of one job the leader fires when
// it finds them due at once (after a time without a leader); it skips the
// rest, to the first time after now.
const CronMaxCatchUp = 1000

// ScheduleFrom returns the time the leader counts the job's times from: its
// Last fired time, or CreatedAt when it never fired. The leader's next time
// is the first time Spec names after it.
func (j *CronJob[T]) ScheduleFrom() time.Time {
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
func (j *CronJob[T]) Upcoming(after time.Time, n int) ([]time.Time, error) {
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
