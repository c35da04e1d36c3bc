package ax

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// CronJob is a periodic task: at every time its Spec names, the leader
// submits Task with the id "cron-<name>-<unix seconds>-<secret>", so each
// scheduled time yields exactly one task, across leader changes and
// restarts. It is the schema AX_CONTROL holds under "cron.<name>"
// ([control.CronJob]), with a [TaskSpec] as its task.
type CronJob = control.CronJob[TaskSpec]

// NewCronSecret returns a new [CronJob.Secret]: 8 random bytes in hex. The
// leader gives one to a job stored before jobs had secrets.
func NewCronSecret() string { return control.NewCronSecret() }

// validateCron checks the name, spec and task of j.
func validateCron(j *CronJob, now time.Time) error {
	if err := streams.ValidateTaskID(j.Name); err != nil || strings.ContainsAny(j.Name, "/=") {
		return fmt.Errorf("%w: cron name %q: letters, digits, '-' and '_' only", ErrInvalidTask, j.Name)
	}
	if _, err := j.Schedule(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidTask, err)
	}
	t := j.Task
	t.ID, t.Key, t.RunAt, t.Delay = j.TaskID(now), "", time.Time{}, 0
	if _, err := t.normalize(now); err != nil {
		return fmt.Errorf("cron job %s: %w", j.Name, err)
	}
	return nil
}

// AddCron adds a cron job, or replaces the job of the same name keeping its
// last fired time (so replacing it fires no time twice).
func (c *Client) AddCron(ctx context.Context, job CronJob) (CronJob, error) {
	now := time.Now().UTC()
	if err := validateCron(&job, now); err != nil {
		return job, err
	}
	if c.cfg.PublishOnly {
		return job, fmt.Errorf("add cron %s: %w", job.Name, ErrPublishOnly)
	}
	bucket, err := control.Open(ctx, c.js, c.cfg.Names)
	if err != nil {
		return job, fmt.Errorf("add cron %s: %w", job.Name, err)
	}
	sched, _ := job.Schedule()
	key := control.CronKeyPrefix + job.Name
	for {
		job.CreatedAt, job.Last, job.Secret = now, time.Time{}, NewCronSecret()
		entry, err := bucket.Get(ctx, key)
		var rev uint64
		if err == nil {
			var prev CronJob
			if json.Unmarshal(entry.Value(), &prev) == nil {
				job.CreatedAt, job.Last = prev.CreatedAt, prev.Last
				job.Secret = cmp.Or(prev.Secret, job.Secret)
			}
			rev = entry.Revision()
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return job, fmt.Errorf("add cron %s: %w", job.Name, err)
		}
		job.Next = sched.Next(latest(now, job.Last))
		data, err := json.Marshal(&job)
		if err != nil {
			return job, err
		}
		if rev == 0 {
			_, err = bucket.Create(ctx, key, data)
		} else {
			_, err = bucket.Update(ctx, key, data, rev)
		}
		if err == nil {
			return job, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return job, fmt.Errorf("add cron %s: %w", job.Name, err)
		}
	}
}

// ListCron returns the cron jobs, sorted by name.
func (c *Client) ListCron(ctx context.Context) ([]CronJob, error) {
	if c.cfg.PublishOnly {
		return nil, fmt.Errorf("list cron: %w", ErrPublishOnly)
	}
	bucket, err := control.Open(ctx, c.js, c.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("list cron: %w", err)
	}
	keys, err := kv.ListKeys(ctx, c.js, c.cfg.Names.ControlBucket(), control.CronKeyPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("list cron: %w", err)
	}
	var out []CronJob
	for _, key := range keys {
		entry, err := bucket.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cron: %w", err)
		}
		var job CronJob
		if err := json.Unmarshal(entry.Value(), &job); err != nil {
			return nil, fmt.Errorf("list cron: %s: %w", key, err)
		}
		out = append(out, job)
	}
	slices.SortFunc(out, func(a, b CronJob) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveCron removes a cron job; [ErrCronNotFound] if there is none.
func (c *Client) RemoveCron(ctx context.Context, name string) error {
	if c.cfg.PublishOnly {
		return fmt.Errorf("remove cron %s: %w", name, ErrPublishOnly)
	}
	bucket, err := control.Open(ctx, c.js, c.cfg.Names)
	if err != nil {
		return fmt.Errorf("remove cron %s: %w", name, err)
	}
	entry, err := bucket.Get(ctx, control.CronKeyPrefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("remove cron %s: %w", name, ErrCronNotFound)
	}
	if err == nil {
		err = kv.DeleteKey(ctx, bucket, control.CronKeyPrefix+name, entry.Revision())
	}
	if err != nil {
		return fmt.Errorf("remove cron %s: %w", name, err)
	}
	return nil
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
