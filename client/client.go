// Package client is what a program needs to call a corpus cluster: the
// CLI's config file of named environments, the choice of one (flags and
// CORPUS_* variables over the file), TLS that trusts the cluster's CA
// and nothing else, and the API's clients, which wait out an election.
// It holds no server or node code: the CLI's commands reach the cluster
// through it and the API in proto/ alone.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Target is the coordinator a command line chose and how to call it: a
// named environment of the config file, and what overrides it. Empty
// fields mean the environment's own values.
type Target struct {
	// ConfigFile is the CLI config file (--config-file).
	ConfigFile string
	// Env names the environment (--env, CORPUS_ENV); empty: the
	// config file's current one.
	Env string
	// Address, Token and CAFile override the environment's address,
	// token and CA (--address, --token, --ca-cert; CORPUS_ADDR,
	// CORPUS_TOKEN, CORPUS_CA_CERT).
	Address string
	Token   string
	CAFile  string
}

// FillFromEnv fills t's empty fields from the process's CORPUS_*
// variables, and ConfigFile with DefaultConfigPath. Command lines read
// the variables here, once their flags are parsed, and never make them
// flag defaults: a default is printed by --help, and a token must not
// be.
func (t *Target) FillFromEnv() {
	for _, f := range []struct {
		v   *string
		env string
	}{{&t.Env, "CORPUS_ENV"}, {&t.Address, "CORPUS_ADDR"}, {&t.Token, "CORPUS_TOKEN"}, {&t.CAFile, "CORPUS_CA_CERT"}} {
		if *f.v == "" {
			*f.v = os.Getenv(f.env)
		}
	}
	if t.ConfigFile == "" {
		t.ConfigFile = DefaultConfigPath()
	}
}

// Resolve returns the environment t chose, with t's overrides applied.
func (t Target) Resolve() (Environment, error) {
	var e Environment
	cfg, err := LoadConfig(t.ConfigFile)
	if err != nil {
		return e, err
	}
	name := t.Env
	if name == "" {
		name = cfg.Current
	}
	if name != "" {
		ce, ok := cfg.Environments[name]
		if !ok {
			return e, fmt.Errorf("environment %q is not in %s (known: %s); add it with `corpus env add`", name, t.ConfigFile, strings.Join(cfg.Names(), ", "))
		}
		e = *ce
	}
	if t.Address != "" {
		e.Address = t.Address
	}
	if t.Token != "" {
		e.Token = t.Token
	}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return e, fmt.Errorf("--ca-cert: %w", err)
		}
		e.CACert = string(b)
	}
	if e.Address == "" {
		return e, errors.New("no coordinator configured: run `corpus dev`, or pass --address, or add one with `corpus env add`")
	}
	return e, nil
}

// Trust returns the TLS configuration that trusts the environment's CA
// and nothing else, and wants a coordinator at the other end.
func Trust(e Environment) (*tls.Config, error) {
	if e.CACert == "" {
		return nil, fmt.Errorf("no CA to trust for the coordinator at %s: pass --ca-cert FILE (on a coordinator it is DATA_DIR/tls/ca.crt) or save it with `corpus login --ca-cert`", e.Address)
	}
	cas, err := pki.ParseCerts([]byte(e.CACert))
	if err != nil {
		return nil, fmt.Errorf("the CA certificate to trust: %w", err)
	}
	// Several during a rotation of the cluster CA.
	return pki.TrustClientConfig(pki.NewTrust(cas...), nil, pki.RoleCoordinator, ""), nil
}

// Clients are the API clients of one coordinator.
type Clients struct {
	Cluster    corpusv1connect.ClusterServiceClient
	Nodes      corpusv1connect.NodeServiceClient
	Guests     corpusv1connect.GuestServiceClient
	Ingress    corpusv1connect.IngressServiceClient
	DNS        corpusv1connect.DnsServiceClient
	Volumes    corpusv1connect.VolumeServiceClient
	Users      corpusv1connect.UserServiceClient
	Projects   corpusv1connect.ProjectServiceClient
	Audit      corpusv1connect.AuditServiceClient
	Services   corpusv1connect.ServiceServiceClient
	Extensions corpusv1connect.ExtensionServiceClient
	Snapshots  corpusv1connect.SnapshotServiceClient
	Registries corpusv1connect.RegistryServiceClient
}

// electionWait is how long a call waits out a coordinator without a
// leader, or too busy to take a write: an election takes about a second.
const electionWait = 10 * time.Second

// New returns clients of the API an environment names, trusting its CA
// and presenting its token ("" for none); consistent asks for
// linearizable reads. Calls refused for want of a leader are retried
// (see Gone).
func New(e Environment, consistent bool) (*Clients, error) {
	tc, err := Trust(e)
	if err != nil {
		return nil, err
	}
	base := rpc.BaseURL(e.Address)
	hc := rpc.HTTPClient(tc)
	interceptors := []connect.Interceptor{rpc.Bearer(e.Token), rpc.RetryWithoutLeader(electionWait)}
	if consistent {
		interceptors = append(interceptors, rpc.Linearizable())
	}
	opt := connect.WithInterceptors(interceptors...)
	return &Clients{
		Cluster:    corpusv1connect.NewClusterServiceClient(hc, base, opt),
		Nodes:      corpusv1connect.NewNodeServiceClient(hc, base, opt),
		Guests:     corpusv1connect.NewGuestServiceClient(hc, base, opt),
		Ingress:    corpusv1connect.NewIngressServiceClient(hc, base, opt),
		DNS:        corpusv1connect.NewDnsServiceClient(hc, base, opt),
		Volumes:    corpusv1connect.NewVolumeServiceClient(hc, base, opt),
		Users:      corpusv1connect.NewUserServiceClient(hc, base, opt),
		Projects:   corpusv1connect.NewProjectServiceClient(hc, base, opt),
		Audit:      corpusv1connect.NewAuditServiceClient(hc, base, opt),
		Services:   corpusv1connect.NewServiceServiceClient(hc, base, opt),
		Extensions: corpusv1connect.NewExtensionServiceClient(hc, base, opt),
		Snapshots:  corpusv1connect.NewSnapshotServiceClient(hc, base, opt),
		Registries: corpusv1connect.NewRegistryServiceClient(hc, base, opt),
	}, nil
}

// Gone says whether err is the "not found" of a removal whose earlier
// try, cut short by a leader change, may have removed the thing: what
// the caller asked for holds either way.
func Gone(err error) bool { return rpc.Gone(err) }

// WaitReady waits until the coordinator has a leader and its cluster is
// bootstrapped, or ctx ends, or 30 seconds pass.
func (c *Clients) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		res, err := c.Cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		if err == nil && res.Msg.ClusterId != "" && res.Msg.Leader != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coordinator did not become ready: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
