package natstest

import "go.uber.org/goleak"

// LeakOptions are the goleak options of every package that starts embedded
// servers: nats-server keeps a few package-level goroutines alive after
// Shutdown, which are not ax's.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).fetchAccount"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}
}
