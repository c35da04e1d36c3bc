// Package dashboard serves ax's web UI for operators: an HTTP server whose
// pages (embedded in the binary, plain HTML, JavaScript and CSS with no
// build step) show the priority buckets, workers, tasks with their trails,
// dead letters and cron schedules, and offer the operator actions.
//
// The server is a client of the management API (the NATS micro service
// "ax" on "<prefix>.admin.<verb>", see [admin.Client]): every page
// and action is one or more admin calls made with the dashboard's own NATS
// connection, so the browser never talks NATS and the connection's NATS
// permissions apply to everything the dashboard shows or does. It is
// read-only unless [Config.AllowActions] is set; without it the action
// endpoints answer 403 and do nothing. With it, every action must carry
// the per-process token ([Dashboard.ActionToken], header X-Ax-Token). It
// answers only requests whose Host names an allowed host (loopback names,
// the listen host, [Config.AllowedHosts]), so a DNS-rebound page of another
// site reads and does nothing (421).
//
// Guarantees: the dashboard keeps no state but a bounded ring of recent
// stats samples (for the charts); losing it loses only chart history. Every
// goroutine it starts ends when the context given to [Dashboard.Run] or
// [Dashboard.Serve] ends, live (server-sent events) streams included.
package dashboard
