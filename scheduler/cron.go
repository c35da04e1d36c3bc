package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// maxCatchUp bounds the missed times of one job fired when a leader starts.
const maxCatchUp = ax.CronMaxCatchUp

// cronState is a watched job and its schedule.
type cronState struct {
	job   ax.CronJob
	rev   uint64
	sched cron.Schedule
	next  time.Time
	retry time.Time // after a failed fire, not before this
}

// cronLoop submits the tasks of the cron jobs in AX_CONTROL at their times.
// It keeps each job's last submitted time in its record, so a new leader
// fires the times missed since then (each once: the task id derives from
// job name and time, and a record that exists is not submitted again).
//
// The leader's timer is used rather than the server's cron schedules
// because a fired server schedule does not carry the time it was for, and
// the server skips missed repeats after a restart; both are needed for
// exactly one task per scheduled time.
type cronLoop struct {
	l      *Leader
	log    *zap.Logger
	bucket jetstream.KeyValue
	jobs   map[string]*cronState
}

func newCronLoop(l *Leader) *cronLoop {
	return &cronLoop{l: l, log: l.log.Named("cron"), jobs: map[string]*cronState{}}
}

func (c *cronLoop) run(ctx context.Context) error {
	bucket, err := control.Open(ctx, c.l.js, c.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("cron: bind %s: %w", c.l.cfg.Names.ControlBucket(), err)
	}
	c.bucket = bucket
	w, err := bucket.Watch(ctx, control.CronKeyPrefix+"*")
	if err != nil {
		return fmt.Errorf("cron: watch jobs: %w", err)
	}
	defer func() { _ = kv.StopWatch(w) }()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(c.wait(time.Now()))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case entry, ok := <-w.Updates():
			if !ok {
				return errors.New("cron: job watch closed")
			}
			if entry != nil {
				c.update(ctx, entry)
			}
		case <-timer.C:
			c.fireDue(ctx)
		}
	}
}

// update applies a watched change of a job. A value that is no job of
// that name (the management API writes only valid jobs: a value ax did not
// write there, such as a publish acknowledgement a producer's reply
// subject pointed at the key) is replaced by the job this leader knows
// under the name, by compare-and-set; a job it does not know is left out,
// and logged.
func (c *cronLoop) update(ctx context.Context, entry jetstream.KeyValueEntry) {
	name := strings.TrimPrefix(entry.Key(), control.CronKeyPrefix)
	if entry.Operation() != jetstream.KeyValuePut {
		delete(c.jobs, name)
		return
	}
	var job ax.CronJob
	err := json.Unmarshal(entry.Value(), &job)
	var sched cron.Schedule
	if err == nil && job.Name != name {
		err = fmt.Errorf("the value names job %q", job.Name)
	}
	if err == nil {
		sched, err = job.Schedule()
	}
	if err != nil {
		c.restore(ctx, name, entry, err)
		return
	}
	c.jobs[name] = &cronState{job: job, rev: entry.Revision(), sched: sched, next: sched.Next(job.ScheduleFrom())}
}

// restore writes the job this leader knows under name over a value that
// is no job (found: why), by compare-and-set on its revision. The job's
// next fire comes from the watch of that write.
func (c *cronLoop) restore(ctx context.Context, name string, entry jetstream.KeyValueEntry, found error) {
	value := entry.Value()[:min(len(entry.Value()), kv.ForeignValueLen)]
	s, known := c.jobs[name]
	if !known {
		c.log.Warn("bad_cron_job", zap.String("cron", name), zap.Uint64("revision", entry.Revision()), zap.ByteString("value", value), zap.Error(found))
		return
	}
	delete(c.jobs, name) // until the restored job comes back on the watch
	data, err := json.Marshal(&s.job)
	if err == nil && !c.l.held() {
		err = errNotLeading
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = c.bucket.Update(ctx, entry.Key(), data, entry.Revision())
	}
	if err != nil {
		c.log.Warn("cron_job_restore_failed", zap.String("cron", name), zap.Uint64("revision", entry.Revision()), zap.ByteString("value", value), zap.Error(err))
		return
	}
	c.log.Warn("cron_job_restored", zap.String("cron", name), zap.Uint64("foreign_revision", entry.Revision()), zap.ByteString("foreign_value", value), zap.NamedError("found", found))
	if c.l.cfg.OnForeignValue != nil {
		c.l.cfg.OnForeignValue(c.l.cfg.Names.ControlBucket(), "restored")
	}
}

// wait returns how long until the earliest next time.
func (c *cronLoop) wait(now time.Time) time.Duration {
	wait := time.Hour
	for _, s := range c.jobs {
		wait = min(wait, latest(s.next, s.retry).Sub(now))
	}
	return max(wait, 0)
}

// skipTo moves the job's next time to the first one after now, skipping
// the missed ones. Specs are in UTC (see [CronJob]): the robfig schedule
// reads its argument's location, so now is taken in UTC, never local time.
func (s *cronState) skipTo(now time.Time) { s.next = s.sched.Next(now.UTC()) }

// fireDue submits every job's times that are due, oldest first.
func (c *cronLoop) fireDue(ctx context.Context) {
	now := time.Now().UTC()
	for name, s := range c.jobs {
		if s.retry.After(now) {
			continue
		}
		for n := 0; !s.next.After(now) && ctx.Err() == nil; n++ {
			if n == maxCatchUp {
				s.skipTo(now)
				c.log.Warn("cron_catch_up_capped", zap.String("cron", name), zap.Time("skipped_to", s.next))
				break
			}
			if err := c.fire(ctx, s, s.next); errors.Is(err, errNotLeading) {
				return
			} else if err != nil {
				c.log.Warn("cron_fire_failed", zap.String("cron", name), zap.Time("at", s.next), zap.Error(err))
				s.retry = now.Add(time.Second)
				break
			}
			s.next = s.sched.Next(s.next)
		}
	}
}

// fireTimeout bounds one fire.
const fireTimeout = 5 * time.Second

// fire submits the task of one scheduled time, unless it exists, and
// records the time as the job's last. Each write is made only while the
// lease is held ([Elector.Held]): a leader that stepped down or was frozen
// past its lease stops before it, and a fire cut short between the two
// writes is finished by the next leader, whose re-fire of the same time
// finds the task (its id derives from the job and the time) and only
// records the time.
func (c *cronLoop) fire(ctx context.Context, s *cronState, at time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, fireTimeout)
	defer cancel()
	if s.job.Secret == "" { // a job added before secrets: its ids get one from now on
		s.job.Secret = ax.NewCronSecret()
	}
	id := s.job.TaskID(at)
	ref := kv.Ref{Tenant: cmp.Or(s.job.Task.Tenant, ax.DefaultTenant), ID: id}
	if _, _, err := c.l.store.Get(ctx, ref); errors.Is(err, kv.ErrNotFound) {
		task := s.job.Task
		task.ID, task.Key, task.RunAt, task.Delay = id, "", time.Time{}, 0
		// A copy: the job's own headers are stored with it, without these.
		task.Headers = maps.Clone(task.Headers)
		if task.Headers == nil {
			task.Headers = map[string]string{}
		}
		task.Headers[streams.HeaderCron] = s.job.Name
		task.Headers[streams.HeaderCronTime] = at.UTC().Format(time.RFC3339Nano)
		if !c.l.held() {
			return errNotLeading
		}
		if _, err := c.l.client.Submit(ctx, task); err != nil {
			return err
		}
		c.log.Debug("cron_fired", zap.String("cron", s.job.Name), zap.String("task_id", id), zap.Time("at", at))
	} else if err != nil {
		return err
	}
	job := s.job
	job.Last, job.Next = at.UTC(), s.sched.Next(at).UTC()
	data, err := json.Marshal(&job)
	if err != nil {
		return err
	}
	if !c.l.held() {
		return errNotLeading
	}
	rev, err := c.bucket.Update(ctx, control.CronKeyPrefix+job.Name, data, s.rev)
	if err != nil {
		// Changed or removed meanwhile: the watch brings the new record,
		// and the task's id keeps a re-fire from doubling it.
		return nil
	}
	s.job, s.rev = job, rev
	return nil
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
