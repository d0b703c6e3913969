// Package services runs the services whose guests are on this node: for
// each, the template the service was made with (its scripts, its
// environment with the credentials) is installed in the guest, setup
// prepares the data on the service's volume (leaving existing data
// alone), the server runs under the guest's process supervisor
// (agent/runtime), and the template's health script says, every
// interval, whether it serves. What it finds is reported with the node's
// status. Backups (Dump) and restores (Load) run the template's backup
// and restore scripts in the guest.
//
// It is level-based like the rest of the agent: a worker per service
// guest compares what the guest holds (a marker naming the template's
// digest and the environment's) with what it should, and installs and
// starts again whatever is missing: a guest recreated empty, or one whose
// server was stopped by hand, serves again from the data on its volume.
//
// What it needs from the agent is small (Agent): the guest by name with
// its driver, and calls to the coordinator.
package services

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/agent/runtime"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Paths in a service's guest.
const (
	Dir     = "/usr/local/lib/corpus/service"
	envFile = Dir + "/env.json"
	marker  = Dir + "/installed"
	// project is the supervisor's name for the service's processes.
	project = "service"
)

// Agent is the agent as the services see it.
type Agent interface {
	// Guest returns the guest of that name this node runs and its
	// driver (nil, nil when there is none).
	Guest(name string) (*corpusv1.Guest, drivers.Driver)
	// GuestObserved is how the agent last found the guest of that id
	// (nil when it has not yet).
	GuestObserved(id string) *corpusv1.GuestObserved
	// CallCoordinator runs f against the coordinator, failing over once.
	CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error
}

// Config is what a Manager is built from.
type Config struct {
	Runtime *runtime.Runtime
	Logger  *slog.Logger
	// SpoolDir is where restores keep a backup until its checksum is
	// verified (on the node, never in the guest).
	SpoolDir string
}

// Manager runs the services of this node's guests.
type Manager struct {
	cfg Config
	a   Agent

	mu       sync.Mutex
	workers  map[string]*worker // by guest id
	observed map[string]*corpusv1.ServiceObserved
	wg       sync.WaitGroup
}

// New returns a Manager; Sync starts its workers.
func New(cfg Config, a Agent) *Manager {
	return &Manager{cfg: cfg, a: a, workers: map[string]*worker{}, observed: map[string]*corpusv1.ServiceObserved{}}
}

// Sync makes a worker run for each service guest of this node (guest id
// to service name) and ends those of guests that left; it returns at once.
func (m *Manager) Sync(ctx context.Context, services map[string]string, guests map[string]*corpusv1.Guest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, name := range services {
		g := guests[id]
		if g == nil {
			continue
		}
		w := m.workers[id]
		if w == nil || w.service != name {
			if w != nil {
				w.cancel()
			}
			wctx, cancel := context.WithCancel(ctx)
			w = &worker{m: m, guestID: id, guest: g.Name, service: name, cancel: cancel, kick: make(chan struct{}, 1)}
			m.workers[id] = w
			m.wg.Add(1)
			go func() { defer m.wg.Done(); w.run(wctx) }()
		}
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	for id, w := range m.workers {
		if _, ok := services[id]; !ok || guests[id] == nil {
			w.cancel()
			delete(m.workers, id)
		}
	}
}

// Wait waits for the workers to end (their context ended).
func (m *Manager) Wait() { m.wg.Wait() }

// Report is how the services of this node are, for the status report.
func (m *Manager) Report() []*corpusv1.ReportedService {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*corpusv1.ReportedService, 0, len(m.observed))
	for _, id := range slices.Sorted(maps.Keys(m.observed)) {
		out = append(out, &corpusv1.ReportedService{ServiceId: id, Observed: m.observed[id]})
	}
	return out
}

func (m *Manager) observe(serviceID, state, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.observed[serviceID]; o != nil && o.State == state && o.Message == msg {
		return
	}
	m.observed[serviceID] = &corpusv1.ServiceObserved{State: state, Message: msg, Since: timestamppb.Now()}
}

func (m *Manager) forget(serviceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.observed, serviceID)
}

// worker keeps one service running in its guest.
type worker struct {
	m       *Manager
	guestID string
	guest   string
	service string
	cancel  context.CancelFunc
	kick    chan struct{}

	// op is held by a round of the worker and by a dump or restore: one
	// thing at a time happens to the service.
	op sync.Mutex

	// rt is the service as the coordinator last gave it; nil until then.
	rt *corpusv1.ServiceRuntimeResponse
	// healthy is when the health script last passed since the server
	// started; started is when it was started.
	healthy, started time.Time
	lastErr          string
	loggedAt         time.Time
	// failures counts the starts that failed in a row: the next waits
	// longer, kicks or not.
	failures int
	// guestFailed is why the guest last failed to be made or started,
	// until it runs: while the agent tries it again the service stays
	// unhealthy for that reason, rather than "starting".
	guestFailed string
}

func (w *worker) run(ctx context.Context) {
	defer func() {
		if w.rt != nil {
			w.m.forget(w.rt.Service.Id)
		}
	}()
	for {
		w.op.Lock()
		interval := w.step(ctx)
		backingOff := w.failures > 0
		w.op.Unlock()
		t := time.NewTimer(interval)
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-w.kick:
				if !backingOff {
					break wait
				}
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
}

// step does one round and says when the next is due.
func (w *worker) step(ctx context.Context) time.Duration {
	g, d := w.m.a.Guest(w.guest)
	if g == nil || d == nil {
		return time.Minute
	}
	if w.rt == nil {
		if err := w.fetch(ctx); err != nil {
			w.fail("asking the coordinator for the service", err)
			return 5 * time.Second
		}
	}
	svc := w.rt.Service
	interval := healthInterval(svc.TemplateSpec)
	if g.DesiredState != corpusv1.DesiredRunning {
		w.m.observe(svc.Id, corpusv1.ServiceStopped, "")
		w.healthy, w.started, w.guestFailed = time.Time{}, time.Time{}, ""
		return interval
	}
	st, err := d.Inspect(ctx, w.guest)
	if err != nil || st.State != corpusv1.ObservedRunning {
		// A guest that cannot be made or started (its image cannot be
		// built, say) makes the service unhealthy, for the same reason,
		// also while the agent tries it again.
		if o := w.m.a.GuestObserved(w.guestID); o.GetState() == corpusv1.ObservedFailed {
			w.guestFailed = firstLine(o.GetMessage())
		}
		if w.guestFailed != "" {
			w.m.observe(svc.Id, corpusv1.ServiceUnhealthy, "its guest "+w.guest+" cannot run: "+w.guestFailed)
			return time.Second
		}
		w.m.observe(svc.Id, corpusv1.ServiceStarting, "waiting for its guest to run")
		return time.Second
	}
	w.guestFailed = ""
	if err := w.ensure(ctx, d); err != nil {
		w.fail("starting the service", err)
		// The first line says what failed without what changes from one
		// try to the next (the server's own output, with its times): an
		// unchanged report writes nothing.
		w.m.observe(svc.Id, corpusv1.ServiceUnhealthy, firstLine(err.Error()))
		w.failures++
		return min(time.Duration(w.failures)*5*time.Second, time.Minute)
	}
	w.failures = 0
	out, err := w.script(ctx, d, "health", 0, nil, nil)
	switch {
	case err == nil:
		w.healthy = time.Now()
		w.m.observe(svc.Id, corpusv1.ServiceHealthy, "")
		w.lastErr = ""
	case w.healthy.IsZero() && time.Since(w.started) < startGrace:
		w.m.observe(svc.Id, corpusv1.ServiceStarting, lastLine(out, err))
		return min(interval, time.Second)
	default:
		w.m.observe(svc.Id, corpusv1.ServiceUnhealthy, lastLine(out, err))
	}
	return interval
}

// startGrace is how long a started server may take to pass its health
// check before it counts as unhealthy.
const startGrace = 2 * time.Minute

func healthInterval(t *corpusv1.ServiceTemplate) time.Duration {
	d, err := time.ParseDuration(t.GetHealthInterval())
	if err != nil || d <= 0 {
		return 5 * time.Second
	}
	return d
}

// fail logs a failure when it is not the one logged last (compared by
// its first line), or once a minute.
func (w *worker) fail(what string, err error) {
	msg := firstLine(err.Error())
	if msg != w.lastErr || time.Since(w.loggedAt) > time.Minute {
		w.lastErr, w.loggedAt = msg, time.Now()
		w.m.cfg.Logger.Warn(what, "service", w.service, "guest", w.guest, "error", err)
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// fetch asks the coordinator for the service and its environment.
func (w *worker) fetch(ctx context.Context) error {
	var res *connect.Response[corpusv1.ServiceRuntimeResponse]
	err := w.m.a.CallCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		var err error
		res, err = c.ServiceRuntime(ctx, connect.NewRequest(&corpusv1.ServiceRuntimeRequest{Service: w.service}))
		return err
	})
	if err != nil {
		return err
	}
	if res.Msg.Service.GetTemplateSpec() == nil {
		return fmt.Errorf("service %s has no template", w.service)
	}
	w.rt = res.Msg
	return nil
}

// want is what the guest's marker says once the service's runtime is
// in place: the template's digest and a hash of its environment.
func (w *worker) want() string {
	b, _ := json.Marshal(w.rt.Env)
	h := sha256.Sum256(b)
	return w.rt.Service.TemplateSpec.Digest + " " + hex.EncodeToString(h[:8])
}

// ensure installs and starts the service in the guest unless its marker
// says it is there, and starts the server again when the supervisor
// lost it.
func (w *worker) ensure(ctx context.Context, d drivers.Driver) error {
	var out bytes.Buffer
	code, err := d.Exec(ctx, w.guest, drivers.ExecRequest{Argv: []string{"cat", marker}, Stdout: &out})
	if err != nil {
		return err
	}
	if code == 0 && strings.TrimSpace(out.String()) == w.want() {
		ps, err := w.m.cfg.Runtime.Status(ctx, d, w.guest, project)
		if err == nil && len(ps) > 0 {
			return nil
		}
	}
	return w.install(ctx, d)
}

// install puts the template's scripts and the environment in the guest,
// runs setup, and (re)starts the server under the supervisor.
func (w *worker) install(ctx context.Context, d drivers.Driver) error {
	t := w.rt.Service.TemplateSpec
	rt := w.m.cfg.Runtime
	if err := rt.Ensure(ctx, d, w.guest); err != nil {
		return fmt.Errorf("installing the supervisor: %w", err)
	}
	stage := Dir + ".new"
	if _, err := w.exec(ctx, d, nil, "sh", "-c", `rm -rf "$1" && mkdir -p "$1" && chmod 700 "$1"`, "sh", stage); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(t.Files)) {
		if _, err := w.exec(ctx, d, bytes.NewReader(t.Files[name]), "sh", "-c", `cat > "$1/$2" && chmod 700 "$1/$2"`, "sh", stage, name); err != nil {
			return fmt.Errorf("installing script %s: %w", name, err)
		}
	}
	if _, err := w.exec(ctx, d, nil, "sh", "-c", `rm -rf "$2" && mv "$1" "$2"`, "sh", stage, Dir); err != nil {
		return err
	}
	if err := rt.WriteEnv(ctx, d, w.guest, envFile, 0, 0, w.rt.Env); err != nil {
		return err
	}
	// setup may need the data to itself.
	if err := w.stopServer(ctx, d); err != nil {
		return err
	}
	if out, err := w.script(ctx, d, "setup", 0, nil, nil); err != nil {
		return fmt.Errorf("setup: %s", lastLine(out, err))
	}
	if err := w.startServer(ctx, d); err != nil {
		return err
	}
	if _, err := w.exec(ctx, d, strings.NewReader(w.want()+"\n"), "sh", "-c", `cat > "$1.tmp" && mv "$1.tmp" "$1"`, "sh", marker); err != nil {
		return err
	}
	w.m.cfg.Logger.Info("service started in its guest", "service", w.service, "guest", w.guest, "template", t.Name, "version", w.rt.Service.Version)
	return nil
}

// startServer starts the server as the supervisor's only process of the
// service, replacing one that ran.
func (w *worker) startServer(ctx context.Context, d drivers.Driver) error {
	rt := w.m.cfg.Runtime
	if err := w.stopServer(ctx, d); err != nil {
		return err
	}
	res, err := rt.Call(ctx, d, w.guest, supervisor.Request{Op: supervisor.OpStart, Generation: &supervisor.Generation{
		Project: project, ID: "server", Release: w.rt.Service.Version, Dir: "/", EnvFile: envFile,
		Processes: []supervisor.Process{{Name: "server", Command: "exec sh " + Dir + "/start"}},
		Grace:     supervisor.Duration(30 * time.Second), MinUptime: supervisor.Duration(time.Second),
	}})
	if err != nil {
		return err
	}
	if res.Error != "" {
		return fmt.Errorf("starting the server: %s: %s", res.Error, strings.Join(res.Output, "\n"))
	}
	w.started, w.healthy = time.Now(), time.Time{}
	return nil
}

// stopServer stops the server (a restore that replaces its files).
func (w *worker) stopServer(ctx context.Context, d drivers.Driver) error {
	res, err := w.m.cfg.Runtime.Call(ctx, d, w.guest, supervisor.Request{Op: supervisor.OpStop, Project: project})
	if err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}

// script runs one of the template's scripts in the guest with the
// service's environment, at niceness nice (0: as the guest's exec runs
// it). stdout, when given, takes the script's output (its errors are
// returned).
func (w *worker) script(ctx context.Context, d drivers.Driver, name string, nice int, stdin io.Reader, stdout io.Writer) ([]byte, error) {
	var out bytes.Buffer
	argv := []string{"sh", Dir + "/" + name}
	if nice != 0 {
		// renice is in busybox and in Debian's essential packages; an
		// image without it runs the script as it is.
		argv = []string{"sh", "-c", `renice -n ` + strconv.Itoa(nice) + ` -p $$ >/dev/null 2>&1; exec sh "$1"`, "sh", Dir + "/" + name}
	}
	req := drivers.ExecRequest{Argv: argv, Env: w.rt.Env, Dir: "/", Stdin: stdin, Stdout: &out, Stderr: &out}
	if stdout != nil {
		req.Stdout = stdout
	}
	code, err := d.Exec(ctx, w.guest, req)
	if err != nil {
		return out.Bytes(), err
	}
	if code != 0 {
		return out.Bytes(), fmt.Errorf("%s exited with status %d", name, code)
	}
	return out.Bytes(), nil
}

func (w *worker) exec(ctx context.Context, d drivers.Driver, stdin io.Reader, argv ...string) ([]byte, error) {
	var out bytes.Buffer
	req := drivers.ExecRequest{Argv: argv, Stdin: stdin, Stdout: &out, Stderr: &out}
	code, err := d.Exec(ctx, w.guest, req)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return out.Bytes(), fmt.Errorf("%s: exit status %d: %s", argv[0], code, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// lastLine is what to say of a script's run: the last line of its output
// that says error (or fatal), else its last line, or the error.
func lastLine(out []byte, err error) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	for i := len(lines) - 1; i >= 0; i-- {
		if low := strings.ToLower(lines[i]); strings.Contains(low, "error") || strings.Contains(low, "fatal") {
			l = strings.TrimSpace(lines[i])
			break
		}
	}
	switch {
	case l != "" && err != nil:
		return err.Error() + ": " + l
	case l != "":
		return l
	case err != nil:
		return err.Error()
	}
	return ""
}
