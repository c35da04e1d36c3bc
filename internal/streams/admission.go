package streams

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Refusing reports whether the priority bucket whose configuration is cfg
// refuses non-core tasks: its stream lacks the submit subject
// ([Names.SubmitFilter]) while it keeps the core one, so that a publish to
// <prefix>.submit.p<N>.… finds no stream (a JetStream publish is answered
// "no responders") and only <prefix>.core.p<N>.… is stored.
func (n Names) Refusing(cfg jetstream.StreamConfig) bool {
	p, ok := n.PriorityOf(cfg.Name)
	return ok && !slices.Contains(cfg.Subjects, n.SubmitFilter(p)) && slices.Contains(cfg.Subjects, n.CoreFilter(p))
}

// SetAdmission makes the server refuse (refuse true) or admit non-core
// tasks on priority bucket p, by removing or restoring the bucket's submit
// subject; every other setting of the stream is kept as it is. It returns
// whether it changed the stream. Core tasks, control-plane copies and the
// tasks already stored are not affected.
func SetAdmission(ctx context.Context, js jetstream.JetStream, n Names, p int, refuse bool) (bool, error) {
	name := n.PriorityStream(p)
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return false, fmt.Errorf("admission of %s: %w", name, err)
	}
	cfg := stream.CachedInfo().Config
	if !slices.Contains(cfg.Subjects, n.CoreFilter(p)) {
		return false, fmt.Errorf("admission of %s: the stream has no core subject %s: run ax provision", name, n.CoreFilter(p))
	}
	if n.Refusing(cfg) == refuse {
		return false, nil
	}
	submit := n.SubmitFilter(p)
	if refuse {
		cfg.Subjects = slices.DeleteFunc(slices.Clone(cfg.Subjects), func(s string) bool { return s == submit })
	} else {
		cfg.Subjects = append([]string{submit}, cfg.Subjects...)
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return false, fmt.Errorf("admission of %s: update subjects to %v: %w", name, cfg.Subjects, err)
	}
	return true, nil
}
