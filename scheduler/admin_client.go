package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// AdminClient calls the management API over NATS request/reply.
type AdminClient struct {
	nc    *nats.Conn
	names streams.Names
}

// NewAdminClient returns a client of the management API of the deployment
// names (zero: the default "ax").
func NewAdminClient(nc *nats.Conn, names streams.Names) *AdminClient {
	if names == (streams.Names{}) {
		names = streams.DefaultNames()
	}
	return &AdminClient{nc: nc, names: names}
}

// Call sends req as JSON to verb and decodes the reply into resp. An error
// reply is returned as an [*AdminError] with its code and message.
func (c *AdminClient) Call(ctx context.Context, verb string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	subject := c.names.AdminSubject(verb)
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no ax management API answers on %s: start `ax dev` or `ax scheduler`, and check --server and --prefix: %w", subject, err)
	}
	if err != nil {
		return fmt.Errorf("call %s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return &AdminError{Code: n, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("decode %s reply: %w", verb, err)
	}
	return nil
}
