package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/redact"
)

// upcomingRuns is how many next runs the cron page lists per job.
const upcomingRuns = 5

// CronSchedule is one cron job of the control bucket ("cron.<name>") as
// the cron page shows it.
type CronSchedule struct {
	Name string `json:"name"`
	Spec string `json:"spec"`
	// Type, Tenant and Priority of the task the job submits.
	Type     string `json:"type,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Priority int    `json:"priority"`
	// Last is the last scheduled time submitted; Next the one the leader
	// recorded as next.
	Last *time.Time `json:"last,omitempty"`
	Next *time.Time `json:"next,omitempty"`
	// Upcoming are the next runs from now, as the leader counts them
	// ([ax.CronJob.Upcoming]).
	Upcoming []time.Time `json:"upcoming"`
	// Error says why the entry could not be read or its spec parsed.
	Error string `json:"error,omitempty"`
	// Record is the entry as stored, with its secret masked (it keeps the
	// job's future task ids unguessable: [ax.CronJob.Secret]); null when
	// the entry is not a JSON object, which could hide one anywhere.
	Record json.RawMessage `json:"record"`
}

// CronReply lists the cron jobs, sorted by name.
type CronReply struct {
	Jobs []CronSchedule `json:"jobs"`
	Now  time.Time      `json:"now"`
}

func (d *Dashboard) handleCron(w http.ResponseWriter, r *http.Request) {
	control, err := call(r.Context(), d, controlOf)
	if err != nil {
		d.writeCallError(w, admin.VerbControl, err)
		return
	}
	now := time.Now().UTC()
	reply := &CronReply{Jobs: []CronSchedule{}, Now: now}
	for _, e := range control.Entries {
		if name, ok := ax.CronJobName(e.Key); ok {
			reply.Jobs = append(reply.Jobs, cronSchedule(name, e.Value, now))
		}
	}
	writeJSON(w, http.StatusOK, reply)
}

// cronSchedule reads one job's record and lists its next runs.
func cronSchedule(name string, value json.RawMessage, now time.Time) CronSchedule {
	out := CronSchedule{Name: name, Record: maskSecret(value), Upcoming: []time.Time{}}
	var job ax.CronJob
	if err := json.Unmarshal(value, &job); err != nil {
		out.Error = "unreadable record: " + err.Error()
		return out
	}
	out.Spec, out.Type, out.Tenant = job.Spec, job.Task.Type, job.Task.Tenant
	out.Priority, _ = job.Task.Priority.Level()
	if !job.Last.IsZero() {
		out.Last = &job.Last
	}
	if !job.Next.IsZero() {
		out.Next = &job.Next
	}
	upcoming, err := job.Upcoming(now, upcomingRuns)
	if err != nil {
		out.Error = "bad spec: " + err.Error()
		return out
	}
	out.Upcoming = upcoming
	return out
}

// maskSecret returns a cron job's record with the value of its "secret"
// (any spelling encoding/json reads as the secret) replaced by
// [redact.Mask], or null when the record is not a JSON object.
func maskSecret(value json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(value, &fields) != nil || fields == nil {
		return nil
	}
	for key := range fields {
		if strings.EqualFold(key, "secret") { // as encoding/json matches keys
			fields[key], _ = json.Marshal(redact.Mask)
		}
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil
	}
	return out
}
