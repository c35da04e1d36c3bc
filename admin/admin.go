package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/stderrlog"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultAdminTimeout  = 30 * time.Second
	DefaultNoticeTimeout = 2 * time.Second
	// DefaultPauseSeenTimeout bounds workflow.pause's wait for the leader.
	DefaultPauseSeenTimeout = 5 * time.Second
)

// Config configures a [Service].
type Config struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// Version reported by the micro service (semver). Default "0.0.0".
	Version string
	// Logger. Default: warnings and errors as JSON lines on standard
	// error (zap's production encoding at warn level), so that a server
	// outage is not silent; zap.NewNop() silences it.
	Logger *zap.Logger
	// RequestTimeout bounds the work of one request. Default 30s.
	RequestTimeout time.Duration
	// NoticeTimeout is how long a cancel waits for the running worker to
	// confirm its handler was cancelled. Default 2s.
	NoticeTimeout time.Duration
	// PauseSeenTimeout is how long a workflow.pause waits for the leader
	// to confirm that it saw the pause (and so that no release of the
	// workflow is under way). Default 5s; past it the reply says the pause
	// is not confirmed yet.
	PauseSeenTimeout time.Duration
	// Store configures the task record store.
	Store kv.StoreConfig
}

var serviceName = regexp.MustCompile(`^[A-Za-z0-9\-_]+$`)

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Version = cmp.Or(out.Version, "0.0.0")
	if out.Logger == nil {
		out.Logger = stderrlog.New()
	}
	out.RequestTimeout = cmp.Or(out.RequestTimeout, DefaultAdminTimeout)
	out.NoticeTimeout = cmp.Or(out.NoticeTimeout, DefaultNoticeTimeout)
	out.PauseSeenTimeout = cmp.Or(out.PauseSeenTimeout, DefaultPauseSeenTimeout)
	out.Store.Names = out.Names
	return &out
}

func (c *Config) validate() error {
	if !serviceName.MatchString(c.Names.Prefix()) {
		return fmt.Errorf("admin config: prefix %q cannot name a micro service (letters, digits, '-', '_')", c.Names.Prefix())
	}
	if c.RequestTimeout < time.Second || c.NoticeTimeout <= 0 || c.PauseSeenTimeout <= 0 {
		return errors.New("admin config: RequestTimeout must be at least 1s, NoticeTimeout and PauseSeenTimeout positive")
	}
	return nil
}

// Service is the management API: a NATS micro service named after the prefix
// ("ax") whose endpoints answer JSON on "<prefix>.admin.<verb>". Every
// action on a task is a compare-and-set through [kv.Store] that names the
// operator action in the task's trail. Create it with [New], then
// [Service.Start] and [Service.Stop] it once.
type Service struct {
	cfg   *Config
	js    jetstream.JetStream
	store *kv.Store
	moves *move.Mover
	log   *zap.Logger

	mu  sync.Mutex
	svc micro.Service // (mu)
}

// New returns the management API on the connection of js; it serves
// nothing until Start. The streams and buckets must be provisioned.
func New(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store, err := kv.NewStore(ctx, js, &cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("new admin: %w", err)
	}
	moves, err := move.New(js, store, &move.Config{Names: cfg.Names})
	if err != nil {
		return nil, fmt.Errorf("new admin: %w", err)
	}
	return &Service{cfg: cfg, js: js, store: store, moves: moves, log: cfg.Logger.Named("scheduler.admin")}, nil
}

// startFlushTimeout bounds Start's wait for the server to confirm the
// endpoints' subscriptions.
const startFlushTimeout = 10 * time.Second

// Start registers the micro service and its endpoints; when it returns
// without error, the server routes requests to them.
func (a *Service) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.svc != nil {
		return errors.New("admin already started")
	}
	svc, err := micro.AddService(a.js.Conn(), micro.Config{
		Name:        a.cfg.Names.Prefix(),
		Version:     a.cfg.Version,
		Description: "ax management API: inspect and act on tasks, dead letters and workers",
		Metadata:    map[string]string{"prefix": a.cfg.Names.Prefix()},
	})
	if err != nil {
		return fmt.Errorf("start admin: %w", err)
	}
	group := svc.AddGroup(a.cfg.Names.Prefix() + ".admin")
	handlers := map[string]func(context.Context, []byte) (any, error){
		VerbTaskGet: a.taskGet, VerbTaskTrail: a.taskTrail, VerbTaskCancel: a.taskCancel,
		VerbTaskPause: a.taskPause, VerbTaskResume: a.taskResume, VerbTaskReprioritize: a.taskReprioritize,
		VerbTasksCancel: a.tasksCancel, VerbDLQList: a.dlqList, VerbDLQReplay: a.dlqReplay,
		VerbStats: a.stats, VerbWorkers: a.workers, VerbTasksList: a.tasksList, VerbControl: a.control,
		VerbRejectsSample: a.rejectsSample, VerbUnservedDeadline: a.unservedDeadline,
		VerbLimitSet: a.limitSet, VerbLimitRemove: a.limitRemove, VerbLimitList: a.limitList,
		VerbPause: a.pause, VerbResume: a.resume, VerbWorkflowCancel: a.workflowCancel,
		VerbWorkflowList: a.workflowList, VerbWorkflowPause: a.workflowPause, VerbWorkflowResume: a.workflowResume,
		VerbWorkflowGet: a.workflowGet,
	}
	for _, verb := range Verbs() {
		name := strings.ReplaceAll(verb, ".", "_")
		if err := group.AddEndpoint(name, a.endpoint(verb, handlers[verb]), micro.WithEndpointSubject(verb)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("start admin: endpoint %s: %w", verb, err)
		}
	}
	// The subscriptions are on the server once a flush returns, so a request
	// sent by anyone after Start returns finds a responder.
	flushCtx, cancel := context.WithTimeout(ctx, startFlushTimeout)
	defer cancel()
	if err := a.js.Conn().FlushWithContext(flushCtx); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("start admin: register subscriptions: %w", err)
	}
	a.svc = svc
	a.log.Info("admin_started", zap.String("service", a.cfg.Names.Prefix()), zap.String("subjects", a.cfg.Names.AdminSubject(">")))
	return nil
}

// Stop unregisters the service; requests in progress finish.
func (a *Service) Stop(_ context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.svc == nil {
		return nil
	}
	err := a.svc.Stop()
	a.svc = nil
	if err != nil {
		return fmt.Errorf("stop admin: %w", err)
	}
	return nil
}

// Run starts the service, serves until ctx ends and stops it, as
// worker.Worker.Run and leader.Leader.Run do: it returns Start's error,
// or nil once stopped.
func (a *Service) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return a.Stop(context.WithoutCancel(ctx))
}

// endpoint adapts a JSON handler to micro: a reply, or an error with a code
// and a message in the micro error headers (and as a JSON body); see
// [Service.respond].
func (a *Service) endpoint(verb string, h func(context.Context, []byte) (any, error)) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.RequestTimeout)
		defer cancel()
		var resp any
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					a.log.Error("admin_panic", zap.String("verb", verb), zap.Any("panic", p))
					err = &Error{Code: CodeInternal, Message: fmt.Sprintf("internal error in %s: %v; please report it", verb, p)}
				}
			}()
			resp, err = h(ctx, r.Data())
		}()
		if err != nil {
			ae := toError(err)
			if ae.Code == CodeInternal {
				a.log.Warn("admin_error", zap.String("verb", verb), zap.Error(err))
			}
			a.respondError(r, verb, ae)
			return
		}
		a.respond(r, verb, resp)
	})
}

// decode reads a JSON request; an empty body is an empty request.
func decode(data []byte, v any) error {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("request is not valid JSON for this endpoint: %s; see docs/API.md", err.Error())
	}
	return nil
}

func validID(id string) error {
	if id == "" {
		return badRequest(`"id" is required: the task id, as printed by ax submit`)
	}
	if err := streams.ValidateTaskID(id); err != nil {
		return badRequest("%s", err.Error())
	}
	return nil
}
