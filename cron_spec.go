package ax

import "github.com/ax-mesh/ax/control"

// CronJobName returns the job name of a control bucket key ("cron.<name>"),
// and whether the key is a cron job's ([control.CronJobName]).
func CronJobName(key string) (string, bool) { return control.CronJobName(key) }

// CronMaxCatchUp is how many missed times of one job the leader fires when
// it finds them due at once ([control.CronMaxCatchUp]).
const CronMaxCatchUp = control.CronMaxCatchUp
