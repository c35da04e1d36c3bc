package kv

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stopWatchWait bounds how long [StopWatch] drains a stopped watcher.
const stopWatchWait = 5 * time.Second

// StopWatch stops w and drains its updates until nats.go closes the
// channel (for at most 5 s). nats.go (v1.55.0) hands each update over with a
// blocking send on a channel of 256 from the subscription's goroutine, and
// Stop only unsubscribes: a watcher whose reader left with that channel full
// kept the goroutine blocked for good, with its pending messages (goleak
// found one after the worker tests, a mesh member's watch of the members).
// Draining lets the goroutine see the unsubscribe, end and close the
// channel. Every watcher that may be left before its updates end is
// stopped with it.
func StopWatch(w jetstream.KeyWatcher) error {
	err := w.Stop()
	timeout := time.NewTimer(stopWatchWait)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return err
			}
		case <-timeout.C:
			return err
		}
	}
}
