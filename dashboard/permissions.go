package dashboard

import (
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/nats-io/nats.go"
)

// permissions remembers the subjects the server refused this connection,
// so that an admin call that timed out because its request was denied is
// answered 403 with the reason instead of a timeout.
type permissions struct {
	mu     sync.Mutex
	denied map[string]time.Time // subject -> last violation (mu)
}

// watch chains a recorder in front of the connection's async error handler.
func (p *permissions) watch(nc *nats.Conn) {
	p.denied = map[string]time.Time{}
	prev := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if refused := denied.Parse(err, ""); refused != nil && refused.Op == denied.OpPublish {
			p.mu.Lock()
			p.denied[refused.Subject] = time.Now()
			p.mu.Unlock()
		}
		if prev != nil {
			prev(c, sub, err)
		}
	})
}

// isDenied reports whether subject was refused within the last minute.
func (p *permissions) isDenied(subject string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.denied[subject]
	return ok && time.Since(at) < time.Minute
}
