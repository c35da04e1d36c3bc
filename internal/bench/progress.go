package bench

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"
)

// progress draws a bar of done/total on one line until stopped.
type progress struct {
	out   io.Writer
	label string
	total int64
	done  func() int64
	stop  chan struct{}
	ended chan struct{}
}

func startProgress(out io.Writer, label string, total int, done func() int64) *progress {
	p := &progress{out: out, label: label, total: int64(total), done: done, stop: make(chan struct{}), ended: make(chan struct{})}
	if out == nil {
		close(p.ended)
		return p
	}
	go p.run()
	return p
}

func (p *progress) run() {
	defer close(p.ended)
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			p.draw(start)
			fmt.Fprintln(p.out)
			return
		case <-tick.C:
			p.draw(start)
		}
	}
}

func (p *progress) draw(start time.Time) {
	n := min(p.done(), p.total)
	const width = 30
	filled := int(width * n / max(p.total, 1))
	rate := float64(n) / time.Since(start).Seconds()
	fmt.Fprintf(p.out, "\r%-10s [%s%s] %3d%% %d/%d %.0f/s   ", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		100*n/max(p.total, 1), n, p.total, rate)
}

func (p *progress) end() {
	if p.out == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.ended
}

// counter is a progress source.
type counter struct{ n atomic.Int64 }

func (c *counter) load() int64 { return c.n.Load() }
