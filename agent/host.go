package agent

import (
	"context"
	"io"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/agent/deploy"
	"corpus/agent/guests"
	"corpus/agent/load"
	"corpus/agent/logs"
	"corpus/agent/registryauth"
	"corpus/agent/services"
	"corpus/agent/shell"
	"corpus/agent/sshd"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// host is the agent as its subsystems see it: what each asks of the
// node, through the small interface it defines.
type host struct{ a *Agent }

var (
	_ deploy.Agent   = host{}
	_ services.Agent = host{}
	_ sshd.Host      = host{}
	_ logs.Guests    = host{}
	_ shell.Guests   = host{}
	_ guests.Node    = host{}
)

func (h host) Guest(name string) (*corpusv1.Guest, drivers.Driver) {
	g := h.a.desiredByName(name)
	if g == nil {
		return nil, nil
	}
	return g, h.a.drivers[g.Spec.GetDriver()]
}

func (h host) GuestObserved(id string) *corpusv1.GuestObserved {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	if o := h.a.observed[id]; o != nil {
		return proto.CloneOf(o)
	}
	return nil
}

func (h host) DesiredKnown() bool {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.a.known
}

func (h host) CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error {
	return h.a.callCoordinator(f)
}

func (h host) ServeGit(ctx context.Context, user, fp, from, command string, rw io.ReadWriter, stderr io.Writer) int {
	return h.a.deploys.ServeGit(ctx, user, fp, from, command, rw, stderr)
}

func (h host) ShellRequest(ctx context.Context, name, project string, argv []string, env map[string]string, dir string,
	tty bool, term string, size *corpusv1.TerminalSize) (shell.Request, drivers.Driver, error) {
	return h.a.sessions.Request(ctx, name, project, argv, env, dir, tty, term, size)
}

// Current is the guest's desired state, or nil after forgetting its
// worker when the guest is no longer desired. Then the reconcile loop is
// woken: while the worker was there, the guest was not taken for an
// orphan; now it is, and a copy left on the host (the guest was deleted
// elsewhere, or moved to another node) is removed.
func (h host) Current(id string) *corpusv1.Guest {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.desired[id]
	if g == nil {
		delete(a.workers, id)
		delete(a.observed, id)
		a.poke(a.kick)
	}
	return g
}

func (h host) Waiting(id string) string {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.a.guestWaiting[id]
}

func (h host) Project(id string) string {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.a.guestProjects[id]
}

func (h host) SetObserved(id string, o *corpusv1.GuestObserved) { h.a.setObserved(id, o) }

// logTargets are the desired guests for the logs loop (logs.Targets);
// known once the coordinator has named this node.
func (h host) logTargets() ([]logs.Target, bool) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	ts := make([]logs.Target, 0, len(a.desired))
	for id, g := range a.desired {
		o := a.observed[id]
		_, project := a.guestProjects[id]
		ts = append(ts, logs.Target{ID: id, Name: g.Name, Driver: a.drivers[g.Spec.GetDriver()],
			Running: o != nil && o.State == string(drivers.StateRunning), Project: project})
	}
	return ts, a.node != nil
}

// loadSamples are the guests among ids (all when empty) whose init
// process is known, for the Load call.
func (h host) loadSamples(ids []string) []load.Sample {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []load.Sample
	for id, g := range a.desired {
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if o := a.observed[id]; o != nil && o.Pid > 0 {
			out = append(out, load.Sample{GuestID: id, PID: o.Pid, CPUs: float64(g.GetSpec().GetResources().GetCpuMillis()) / 1000})
		}
	}
	return out
}

// fetchTLS asks a coordinator for the TLS material of domains.
func (a *Agent) fetchTLS(ctx context.Context, domains []string) ([]*corpusv1.TlsDomain, error) {
	var out []*corpusv1.TlsDomain
	err := a.callCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		res, err := c.TlsMaterial(ctx, connect.NewRequest(&corpusv1.TlsMaterialRequest{Domains: domains}))
		if err == nil {
			out = res.Msg.Domains
		}
		return err
	})
	return out, err
}

// registryCredentials asks a coordinator for registry host's
// credentials, for one pull.
func (a *Agent) registryCredentials(ctx context.Context, host string) (registryauth.Credentials, error) {
	var out registryauth.Credentials
	err := a.callCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		res, err := c.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: host}))
		if err == nil {
			out = registryauth.Credentials{Found: res.Msg.Found, Username: res.Msg.Username, Password: res.Msg.Password}
		}
		return err
	})
	return out, err
}

// desiredByName is the guest of that name this node runs, nil if none.
func (a *Agent) desiredByName(name string) *corpusv1.Guest {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.desired {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// guestNames gives a guest id's name and project, for shipped lines.
func (a *Agent) guestNames(id string) (guest, project string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if g := a.desired[id]; g != nil {
		guest = g.Name
	}
	return guest, a.guestProjects[id]
}
