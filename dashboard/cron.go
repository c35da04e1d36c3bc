package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/ax-mesh/ax/scheduler"
	"github.com/robfig/cron/v3"
)

// upcomingRuns is how many next runs the cron page lists per job.
const upcomingRuns = 5

// cronParser reads specs as the leader does: 5 fields (minute first), 6
// fields (second first) or a descriptor ("@hourly", "@every 30s"), in UTC.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

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
	// Upcoming are the next runs from now, computed from Spec.
	Upcoming []time.Time `json:"upcoming"`
	// Error says why the entry could not be read or its spec parsed.
	Error string `json:"error,omitempty"`
	// Record is the entry as stored.
	Record json.RawMessage `json:"record"`
}

// cronRecord is the part of a cron job record the page reads.
type cronRecord struct {
	Name string `json:"name"`
	Spec string `json:"spec"`
	Task struct {
		Type     string `json:"type"`
		Tenant   string `json:"tenant"`
		Priority int    `json:"priority"`
	} `json:"task"`
	Last time.Time `json:"last"`
	Next time.Time `json:"next"`
}

// CronReply lists the cron jobs, sorted by name.
type CronReply struct {
	Jobs []CronSchedule `json:"jobs"`
	Now  time.Time      `json:"now"`
}

func (d *Dashboard) handleCron(w http.ResponseWriter, r *http.Request) {
	control, err := call(r.Context(), d, controlOf)
	if err != nil {
		d.writeCallError(w, scheduler.VerbControl, err)
		return
	}
	now := time.Now().UTC()
	reply := &CronReply{Jobs: []CronSchedule{}, Now: now}
	for _, e := range control.Entries {
		if name, ok := strings.CutPrefix(e.Key, "cron."); ok {
			reply.Jobs = append(reply.Jobs, cronSchedule(name, e.Value, now))
		}
	}
	writeJSON(w, http.StatusOK, reply)
}

// cronSchedule reads one job's record and lists its next runs.
func cronSchedule(name string, value json.RawMessage, now time.Time) CronSchedule {
	out := CronSchedule{Name: name, Record: value, Upcoming: []time.Time{}}
	var rec cronRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		out.Error = "unreadable record: " + err.Error()
		return out
	}
	out.Spec, out.Type, out.Tenant, out.Priority = rec.Spec, rec.Task.Type, rec.Task.Tenant, rec.Task.Priority
	if !rec.Last.IsZero() {
		out.Last = &rec.Last
	}
	if !rec.Next.IsZero() {
		out.Next = &rec.Next
	}
	sched, err := cronParser.Parse(rec.Spec)
	if err != nil {
		out.Error = "bad spec: " + err.Error()
		return out
	}
	at := now
	for range upcomingRuns {
		at = sched.Next(at)
		if at.IsZero() {
			break
		}
		out.Upcoming = append(out.Upcoming, at)
	}
	return out
}
