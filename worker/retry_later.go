package worker

import "time"

// writeFailedRetry is when a delivery comes back after the worker could not
// write what it decides (a claim, a deferral to AX_DELAYED) or lost to
// contention: long enough not to spin against a failing server, short next
// to the ack wait.
const writeFailedRetry = time.Second

// retryLater gives d back to JetStream, to be delivered again after
// [writeFailedRetry].
func (d *delivery) retryLater() {
	_ = d.settle(func() error { return d.msg.NakWithDelay(writeFailedRetry) })
}
