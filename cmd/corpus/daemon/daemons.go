package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"corpus/agent"
	"corpus/cmd/corpus/cli"
	"corpus/coordinator"
	"corpus/coordinator/ldapauth"
	"corpus/drivers/catalog"
	"corpus/drivers/lxc"
	"corpus/internal/metrics"
	"corpus/internal/sdnotify"
	"corpus/internal/statelock"
	"corpus/netns/listen"
)

func newCoordinatorCmd(g *cli.Globals) *cobra.Command {
	cfg := coordinator.Default()
	var (
		file   string
		logs   logFlags
		mflags metricsFlags
	)
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run a coordinator replica (Raft, API, scheduler)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyDaemonConfig(cmd, file, "CORPUS_COORDINATOR_"); err != nil {
				return err
			}
			logger, err := logs.logger()
			if err != nil {
				return err
			}
			cfg.Logger = logger
			lock, err := statelock.Acquire(cfg.DataDir)
			if err != nil {
				return err
			}
			defer lock.Release()
			cfg.Heart = notifier(cmd.Context(), logger).Heart("coordinator")
			reg := metrics.NewRegistry()
			cfg.Metrics = reg
			return withMetrics(cmd.Context(), mflags, reg, logger, func(ctx context.Context, url string) error {
				srv, err := coordinator.New(cfg)
				if err != nil {
					return err
				}
				logger.Info("coordinator listening", "api", srv.APIAddr(), "raft", cfg.RaftAddr, "metrics", url, "data_dir", cfg.DataDir)
				if tok := srv.OpsToken(); tok != "" {
					logger.Info("operator token is in the data dir", "file", filepath.Join(cfg.DataDir, coordinator.OpsTokenFile))
				}
				return srv.Serve(ctx)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "config", "", "YAML config file (keys are flag names)")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "folder for the Raft log, snapshots and tokens")
	f.StringVar(&cfg.APIAddr, "api-addr", cfg.APIAddr, "API listen address")
	f.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "Raft listen address")
	f.StringVar(&cfg.ReplicaID, "id", cfg.ReplicaID, "this replica's id in the Raft group")
	f.BoolVar(&cfg.Bootstrap, "bootstrap", cfg.Bootstrap, "form a new cluster when this replica has no Raft state")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", cfg.BootstrapExpect, "replicas that form the cluster together (1, 3 or 5); needs --join")
	f.StringSliceVar(&cfg.Join, "join", nil, "API addresses of the other replicas (comma-separated or repeated)")
	f.StringVar(&cfg.AdvertiseAPI, "advertise-addr", "", "API address other replicas and clients use (default: --api-addr)")
	f.Uint64Var(&cfg.RaftSnapshotThreshold, "raft-snapshot-threshold", 0, "log entries between snapshots (0: Raft's default, 8192)")
	f.Uint64Var(&cfg.RaftTrailingLogs, "raft-trailing-logs", 0, "log entries kept after a snapshot (0: Raft's default, 10240)")
	f.IntVar(&cfg.RaftMultiplier, "raft-multiplier", 1, "scale Raft's heartbeat, election and leader lease timeouts (500, 500, 250 ms) by this, 1 to 10, for busy or slow hosts; every replica of a group should use the same")
	f.DurationVar(&cfg.NodeTimeout, "node-timeout", cfg.NodeTimeout, "mark a node down after this long without a report")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "gossip listen address, UDP and TCP: nodes found dead there are marked down at once (empty: off, heartbeats only)")
	f.StringVar(&cfg.GuestNetwork, "guest-network", cfg.GuestNetwork, "cluster range node guest subnets come from (fixed at bootstrap)")
	f.IntVar(&cfg.NodeSubnetBits, "node-subnet-bits", cfg.NodeSubnetBits, "prefix length of each node's guest subnet (fixed at bootstrap)")
	f.StringVar(&cfg.CACertFile, "cluster-ca", "", "cluster CA certificate to use when this replica has none yet; every replica of a group gets the same (a replica bootstrapping alone creates one)")
	f.StringVar(&cfg.CAKeyFile, "cluster-ca-key", "", "the cluster CA's private key (with --cluster-ca)")
	f.DurationVar(&cfg.CertTTL, "cert-ttl", coordinator.DefaultCertTTL, "lifetime of the certificates the CA issues to replicas and nodes (renewed after two thirds)")
	f.StringVar(&cfg.RestoreFile, "restore", "", "start a new group of this replica alone from a snapshot file (corpus operator snapshot save), on an empty --data-dir; other replicas then join it")
	f.StringVar(&cfg.RestoreKeyFile, "restore-key-file", "", "the key file the --restore snapshot was saved with")
	f.StringVar(&cfg.Snapshots.Dir, "snapshot-dir", "", "folder the leader writes scheduled snapshots of the control plane into (empty: none)")
	f.DurationVar(&cfg.Snapshots.Interval, "snapshot-interval", time.Hour, "time between scheduled snapshots")
	f.IntVar(&cfg.Snapshots.Keep, "snapshot-keep", 24, "scheduled snapshots kept in --snapshot-dir (the oldest are removed)")
	f.StringVar(&cfg.Snapshots.KeyFile, "snapshot-key-file", "", "file holding the secret scheduled snapshots are sealed with (as corpus operator snapshot save --key-file)")
	addDNSFlags(f, &cfg)
	addLDAPFlags(f, &cfg)
	f.StringVar(&cfg.ServiceTemplates, "service-templates", cfg.ServiceTemplates, "folder of service templates added to the built-in ones (one folder each: service.yaml and its scripts)")
	mflags.addr = defaultCoordinatorMetricsAddr
	mflags.add(f, metricsAddrUsage)
	logs.add(f)
	return cmd
}

// notifier returns this daemon's link to the service manager that
// started it (systemd's sd_notify; nothing without NOTIFY_SOCKET), which
// says STOPPING=1 as soon as ctx ends.
func notifier(ctx context.Context, logger *slog.Logger) *sdnotify.Notifier {
	n := sdnotify.New(logger)
	context.AfterFunc(ctx, n.Stopping)
	return n
}

// addLDAPFlags adds the flags of password login against a directory.
func addLDAPFlags(f *pflag.FlagSet, cfg *coordinator.Config) {
	l := &cfg.LDAP
	f.StringVar(&l.URL, "ldap-url", "", "LDAP directory users log in against, ldap://HOST:PORT or ldaps://HOST:PORT (empty: password login off)")
	f.StringVar(&l.UserDN, "ldap-user-dn", "", "bind DN of a user, %s for the user name, e.g. uid=%s,ou=people,dc=example,dc=org")
	f.StringVar(&l.BaseDN, "ldap-base-dn", "", "search users under this DN instead of --ldap-user-dn (search then bind)")
	f.StringVar(&l.UserFilter, "ldap-user-filter", "(uid=%s)", "filter finding a user under --ldap-base-dn, %s for the user name")
	f.StringVar(&l.BindDN, "ldap-bind-dn", "", "DN of the account that searches (with --ldap-base-dn)")
	f.StringVar(&l.BindPasswordFile, "ldap-bind-password-file", "", "file holding the search account's password")
	f.BoolVar(&l.StartTLS, "ldap-starttls", false, "upgrade an ldap:// connection with StartTLS before sending passwords")
	f.StringVar(&l.CAFile, "ldap-ca-file", "", "PEM CA certificates of the directory's TLS certificate (default: the system's)")
	f.DurationVar(&l.Timeout, "ldap-timeout", ldapauth.DefaultTimeout, "bound on dialing and each LDAP operation")
	f.DurationVar(&cfg.LoginTokenTTL, "login-token-ttl", cfg.LoginTokenTTL, "lifetime of the tokens a password login issues (also the longest a client may ask for)")
	f.DurationVar(&cfg.AutoscaleInterval, "autoscale-interval", cfg.AutoscaleInterval, "how often the leader samples the load of autoscaled environments and decides")
	f.DurationVar(&cfg.SeriesInterval, "series-interval", cfg.SeriesInterval, "how often each replica samples what the dashboard plots (node allocation, request and error rates per domain)")
	f.DurationVar(&cfg.CATrustPeriod, "ca-trust-period", cfg.CATrustPeriod, "the least a rotation of the cluster CA stays in its trust phase, for clients to take the new CA before it signs")
	f.DurationVar(&cfg.TokenUseInterval, "token-use-interval", cfg.TokenUseInterval, "the grain of users' tokens' recorded last uses: how often each replica writes those it served (one entry for all)")
}

func newAgentCmd(g *cli.Globals) *cobra.Command {
	cfg := agent.Default()
	var (
		file   string
		logs   logFlags
		mflags metricsFlags
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent (enrolls once, then runs this node's guests)",
		Example: `  corpus agent --coordinator 10.0.0.1:7400 --join-token TOKEN --label region=eu --label zone=a
  corpus agent --state-dir /var/lib/corpus/agent   # already enrolled
  corpus agent --config /etc/corpus/agent-k8s-eu.yaml   # a cluster, see corpus node add-k8s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyDaemonConfig(cmd, file, "CORPUS_AGENT_"); err != nil {
				return err
			}
			if cfg.Name == "" {
				cfg.Name = agent.Default().Name
			}
			logger, err := logs.logger()
			if err != nil {
				return err
			}
			cfg.Logger = logger
			if cfg.Kubernetes.Kubeconfig != "" && slices.Equal(cfg.Drivers, catalog.Defaults()) {
				// An agent serving a cluster runs the cluster's driver only.
				cfg.Drivers = []string{"kubernetes"}
			}
			lock, err := statelock.Acquire(cfg.StateDir)
			if err != nil {
				return err
			}
			defer lock.Release()
			cfg.Heart = notifier(cmd.Context(), logger).Heart("agent")
			reg := metrics.NewRegistry()
			cfg.Metrics = reg
			// The proxy process's metrics, served here too.
			proxyMetrics := &metrics.Deferred{}
			cfg.ProxyMetrics = proxyMetrics.Set
			return withMetrics(cmd.Context(), mflags, prometheus.Gatherers{reg, proxyMetrics}, logger, func(ctx context.Context, url string) error {
				parts, err := agentParts(ctx, cfg)
				var a *agent.Agent
				if err == nil {
					a, err = agent.New(cfg, parts)
				}
				if err != nil {
					if ctx.Err() != nil {
						logger.Info("stopped while starting")
						return nil
					}
					return explainIngress(err)
				}
				if url != "" {
					logger.Info("agent metrics", "url", url)
				}
				return a.Run(ctx)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "config", "", "YAML config file (keys are flag names)")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "folder for the agent's database and guests")
	f.StringSliceVar(&cfg.Coordinators, "coordinator", cfg.Coordinators, "coordinator API addresses (comma-separated or repeated)")
	f.StringVar(&cfg.JoinToken, "join-token", "", "one-time token from `corpus node token` (first start only)")
	f.StringVar(&cfg.Name, "name", "", "node name (a DNS label; default: this host's name)")
	f.StringToStringVar(&cfg.Labels, "label", nil, "node label KEY=VALUE, e.g. region=eu, zone=a, mode=prod (repeatable)")
	f.StringVar(&cfg.APIAddr, "api-addr", cfg.APIAddr, "listen address of the agent's own API")
	f.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "address coordinators use to reach the agent (default: --api-addr)")
	f.StringSliceVar(&cfg.Drivers, "drivers", cfg.Drivers, "drivers to run")
	f.DurationVar(&cfg.ReportInterval, "report-interval", cfg.ReportInterval, "status report (heartbeat) period")
	f.DurationVar(&cfg.ResyncInterval, "resync-interval", cfg.ResyncInterval, "full reconcile period")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "clean shutdown time a guest gets before it is killed")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "gossip listen address, UDP and TCP, advertised with the host of --advertise-addr (empty: off, heartbeats only)")
	addNetworkFlags(f, &cfg)
	addKubernetesFlags(f, &cfg.Kubernetes)
	f.Int64Var(&cfg.LogMaxBytes, "log-max-bytes", 32<<20, "cap of each guest's log kept on the node (corpus logs)")
	f.StringVar(&cfg.ImageCacheMax, "image-cache-max", lxc.DefaultImageCacheMax, "cap of the node's image cache: a size (20G), a share of the disk holding it (25%), or 0 for none; past it, images no guest uses go, least recently used first")
	f.DurationVar(&cfg.LogRetention, "log-retention", 7*24*time.Hour, "how long the node keeps guests' log lines")
	f.StringVar(&cfg.LogShip.Syslog, "log-ship-syslog", "", "send guests' log lines to a syslog receiver as RFC 5424 messages: tcp://HOST:PORT or tls://HOST:PORT")
	f.StringVar(&cfg.LogShip.CAFile, "log-ship-ca", "", "CA certificate (PEM) that verifies a tls:// syslog receiver (default: the system's roots)")
	f.StringVar(&cfg.LogShip.File, "log-ship-file", "", "append guests' log lines to this file as JSON lines (for journald, vector, promtail)")
	mflags.addr = defaultAgentMetricsAddr
	mflags.add(f, metricsAddrUsage)
	logs.add(f)
	return cmd
}

// ingressInUse is an agent's start stopped by a proxy address that
// another process listens on: the error says who, and how to get past it.
type ingressInUse struct{ le *listen.Error }

func (e ingressInUse) Error() string {
	flag, what, other := "--proxy-http-addr", "HTTP", ":8080"
	if e.le.Listener == "https" {
		flag, what, other = "--proxy-https-addr", "HTTPS", ":8443"
	}
	holder := "another program"
	if e.le.Holder != nil {
		holder = e.le.Holder.String()
	}
	return fmt.Sprintf("port %d is in use by %s; stop it, or move corpus's %s ingress with %s (e.g. %s %s)", e.le.Port(), holder, what, flag, flag, other)
}

func (e ingressInUse) Unwrap() error { return e.le }

// explainIngress turns an agent's failed start whose cause is a proxy
// port in use into ingressInUse; other errors stay as they are.
func explainIngress(err error) error {
	var le *listen.Error
	if errors.As(err, &le) && le.InUse {
		return ingressInUse{le}
	}
	return err
}

// addNetworkFlags adds the agent's guest networking flags.
func addNetworkFlags(f *pflag.FlagSet, cfg *agent.Config) {
	f.BoolVar(&cfg.Network, "network", cfg.Network, "run guest networking: bridge, NAT and proxy ingress")
	f.StringVar(&cfg.Bridge, "bridge", cfg.Bridge, "bridge guests join")
	f.StringVar(&cfg.Address, "address", cfg.Address, "node address outside traffic reaches (default: host of --advertise-addr)")
	f.IntVar(&cfg.MinHostPort, "min-host-port", cfg.MinHostPort, "lowest node port guests may publish")
	f.StringVar(&cfg.ProxyHTTPAddr, "proxy-http-addr", cfg.ProxyHTTPAddr, "proxy HTTP listen address")
	if cfg.ProxyHTTPSAddr == "" {
		cfg.ProxyHTTPSAddr = ":443" // https routes need it; "" turns HTTPS off
	}
	f.StringVar(&cfg.ProxyHTTPSAddr, "proxy-https-addr", cfg.ProxyHTTPSAddr, "proxy HTTPS listen address, for https routes' certificates and --proxy-cert files (off when empty)")
	f.StringSliceVar(&cfg.ProxyCerts, "proxy-cert", nil, "HTTPS certificate CERT.pem:KEY.pem (repeatable)")
	f.BoolVar(&cfg.ProxyProcess, "proxy-process", true, "run the proxy as a process of its own that outlives the agent (`corpus proxy`); false runs it in the agent")
	f.StringVar(&cfg.GitAddr, "git-addr", cfg.GitAddr, "SSH git endpoint listen address for pushes (off when empty)")
	f.Int64Var(&cfg.GitMaxPushBytes, "git-max-push-bytes", cfg.GitMaxPushBytes, "largest pack a push may send")
}

// addDNSFlags adds the coordinator's DNS server flags.
func addDNSFlags(f *pflag.FlagSet, cfg *coordinator.Config) {
	f.StringVar(&cfg.DNS.Addr, "dns-addr", cfg.DNS.Addr, "authoritative DNS listen address, UDP and TCP (empty: off)")
	f.StringVar(&cfg.DNSZone, "dns-zone", cfg.DNSZone, "the cluster's DNS zone")
	f.Var(prefixList{&cfg.DNS.Transfer.AllowFrom}, "dns-allow-transfer", "client prefix allowed to transfer the zone (AXFR/IXFR), e.g. 10.0.0.0/24 (repeatable)")
	f.Var(keyMap{&cfg.DNS.Transfer.Keys}, "dns-tsig-key", "TSIG key NAME:BASE64SECRET (hmac-sha256) transfers must be signed with (repeatable)")
	f.StringSliceVar(&cfg.DNS.Transfer.Secondaries, "dns-secondary", nil, "secondary HOST:PORT to NOTIFY on every change (repeatable)")
	f.StringVar(&cfg.DNS.Transfer.NotifyKey, "dns-notify-key", "", "name of the TSIG key that signs NOTIFY messages")
}

// prefixList is a repeatable flag of IP prefixes.
type prefixList struct{ p *[]netip.Prefix }

func (l prefixList) String() string {
	if l.p == nil {
		return ""
	}
	out := make([]string, len(*l.p))
	for i, p := range *l.p {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}

func (l prefixList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a prefix like 10.0.0.0/24", s)
		}
		*l.p = append(*l.p, p)
	}
	return nil
}

func (l prefixList) Type() string { return "prefix" }

// keyMap is a repeatable NAME:SECRET flag.
type keyMap struct{ m *map[string]string }

func (k keyMap) String() string {
	if k.m == nil {
		return ""
	}
	names := make([]string, 0, len(*k.m))
	for n := range *k.m {
		names = append(names, n)
	}
	return strings.Join(names, ",")
}

func (k keyMap) Set(v string) error {
	name, secret, ok := strings.Cut(v, ":")
	if !ok || name == "" || secret == "" {
		return fmt.Errorf("want NAME:BASE64SECRET")
	}
	if *k.m == nil {
		*k.m = map[string]string{}
	}
	(*k.m)[name] = secret
	return nil
}

func (k keyMap) Type() string { return "name:secret" }
