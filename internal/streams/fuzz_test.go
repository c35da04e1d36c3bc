package streams_test

import (
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
)

// FuzzParseStored checks that subject parsing never panics and that what it
// accepts round-trips through StoredSubject.
func FuzzParseStored(f *testing.F) {
	for _, s := range []string{"ax.p0.1.acme.email.k", "ax.p9.1.a.b.c", "ax..", "ax.p1.31.\xff.b.c", "ax.p2.5.a.b.c.ctl", "ax.p2.5.a.b.c.d"} {
		f.Add(s)
	}
	names := streams.DefaultNames()
	f.Fuzz(func(t *testing.T, subject string) {
		s, err := names.ParseStored(subject)
		if err != nil {
			return
		}
		want := names.StoredSubject(s.Priority, s.Shard, s.Tenant, s.Type, s.Key)
		if s.Copy {
			want += ".ctl"
		}
		if got := want; got != subject {
			t.Fatalf("round trip: %q -> %+v -> %q", subject, s, got)
		}
	})
}

// FuzzParseSubmit checks that submit subject parsing never panics, and
// that what it accepts is a submit or a core submit subject that
// round-trips through SubmitSubject or CoreSubject, with the key's shard.
func FuzzParseSubmit(f *testing.F) {
	for _, s := range []string{"ax.submit.p0.acme.email.k", "ax.core.p4.acme.email.k", "ax.delayed.p1.a.b.c", "ax.core.p5.a.b.c",
		"ax.submit.p1.a.b", "ax.core.p1.a.b.c.d", "ax.*.p1.a.b.c", "ax.core.p1.>.b.c", "ax.submit.p2.a.\xff.c", "ax.p2.5.a.b.c"} {
		f.Add(s)
	}
	names := streams.DefaultNames()
	f.Fuzz(func(t *testing.T, subject string) {
		s, err := names.ParseSubmit(subject)
		if err != nil {
			return
		}
		submit := names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key)
		core := names.CoreSubject(s.Priority, s.Tenant, s.Type, s.Key)
		if subject != submit && subject != core {
			t.Fatalf("round trip: %q -> %+v -> %q or %q", subject, s, submit, core)
		}
		if s.Copy || s.Shard != streams.Shard(s.Key) {
			t.Fatalf("%q -> %+v: not a submit of shard %d", subject, s, streams.Shard(s.Key))
		}
	})
}

// FuzzParseHeaders checks that header parsing never panics and that what it
// accepts round-trips through SetHeaders.
func FuzzParseHeaders(f *testing.F) {
	f.Add("id-1", "30s", "3", "true", "2030-01-01T00:00:00Z", "2")
	f.Add("", "x", "-1", "maybe", "never", "z")
	f.Fuzz(func(t *testing.T, id, timeout, attempts, core, deadline, gen string) {
		h := nats.Header{}
		for name, v := range map[string]string{streams.HeaderMsgID: id, streams.HeaderTimeout: timeout,
			streams.HeaderMaxAttempts: attempts, streams.HeaderCore: core, streams.HeaderDeadline: deadline, streams.HeaderGen: gen} {
			if v != "" {
				h.Set(name, v)
			}
		}
		o, err := streams.ParseHeaders(h)
		if err != nil {
			return
		}
		again := nats.Header{}
		o.SetHeaders(again)
		o2, err := streams.ParseHeaders(again)
		if err != nil || !o2.Deadline.Equal(o.Deadline) || o2.ID != o.ID || o2.Timeout != o.Timeout || o2.MaxAttempts != o.MaxAttempts || o2.Gen != o.Gen {
			t.Fatalf("round trip: %+v -> %+v (%v)", o, o2, err)
		}
	})
}
