// Package builtin holds the handler types every ax worker binary registers,
// for demos, tests and operators' smoke checks: sleep, fail and echo.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/worker"
	"go.uber.org/zap"
)

// SleepArgs is the payload of the "sleep" type.
type SleepArgs struct {
	MS   int `json:"ms"`   // how long to sleep, in milliseconds
	Fail int `json:"fail"` // fail this many first attempts
}

// ErrInjected is the error of a deliberately failed attempt.
var ErrInjected = errors.New("injected failure")

// Register adds the built-in types to reg.
func Register(reg *worker.Registry, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	return errors.Join(
		worker.HandleJSON(reg, "sleep", Sleep, nil),
		reg.Handle("fail", Fail, nil),
		reg.Handle("echo", Echo(log.Named("echo")), nil),
	)
}

// sleepProgressFrom is the shortest sleep that reports its progress, and
// sleepProgressEvery how often it does (the worker writes at most one
// report a second to the record): the demo's sleeps of a few milliseconds
// cost no write.
const (
	sleepProgressFrom  = time.Second
	sleepProgressEvery = 500 * time.Millisecond
)

// Sleep sleeps args.MS milliseconds (or until its context ends) and fails
// its first args.Fail attempts. A sleep of a second or more reports its
// progress ([worker.Task.Progress]: "slept 2s of 5s"), so that `ax task
// get` and the dashboard show it moving.
func Sleep(ctx context.Context, task *worker.Task, args SleepArgs) error {
	if args.MS < 0 || args.Fail < 0 {
		return worker.Permanent(fmt.Errorf("sleep: ms and fail must not be negative"))
	}
	if args.MS > 0 {
		total := time.Duration(args.MS) * time.Millisecond
		t := time.NewTimer(total)
		defer t.Stop()
		var tick <-chan time.Time
		if total >= sleepProgressFrom {
			ticker := time.NewTicker(sleepProgressEvery)
			defer ticker.Stop()
			tick = ticker.C
		}
		start := time.Now()
	sleep:
		for {
			select {
			case <-t.C:
				break sleep
			case <-tick:
				slept := min(time.Since(start), total)
				note := fmt.Sprintf("slept %s of %s", slept.Truncate(100*time.Millisecond), total)
				if err := task.Progress(ctx, 100*slept.Seconds()/total.Seconds(), note); err != nil {
					return err
				}
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if tick != nil {
			if err := task.Progress(ctx, 100, fmt.Sprintf("slept %s", total)); err != nil {
				return err
			}
		}
	}
	if task.Attempt <= args.Fail {
		return fmt.Errorf("sleep: attempt %d of %d planned failures: %w", task.Attempt, args.Fail, ErrInjected)
	}
	return nil
}

// Fail always fails permanently.
func Fail(_ context.Context, task *worker.Task) error {
	return worker.Permanent(fmt.Errorf("fail: task %s fails by design: %w", task.ID, ErrInjected))
}

// Echo logs the payload and succeeds with the payload as its result
// (`ax submit echo --payload hi --wait` prints hi). A payload larger than
// the worker takes as a result ([worker.Config.MaxResultBytes]) succeeds
// without one (logged as echo_result_dropped): echo also carries large
// payloads through the mesh in tests and smoke checks.
func Echo(log *zap.Logger) worker.HandlerFunc {
	return func(_ context.Context, task *worker.Task) error {
		log.Info("echo", zap.String("task_id", task.ID), zap.ByteString("payload", task.Payload))
		if limit := task.ResultLimit(); limit > 0 && len(task.Payload) > limit {
			log.Info("echo_result_dropped", zap.String("task_id", task.ID), zap.Int("size", len(task.Payload)), zap.Int("limit", limit))
			return nil
		}
		task.SetResult(task.Payload)
		return nil
	}
}
