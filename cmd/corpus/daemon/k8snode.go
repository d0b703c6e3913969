package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"corpus/cmd/corpus/cli"
	"corpus/drivers"
	"corpus/drivers/catalog"
	"corpus/internal/names"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

// capacityFlag is a --capacity flag: memory=8G,cpus=4,disk=100G.
type capacityFlag struct{ c *drivers.Capacity }

func (f capacityFlag) Type() string { return "capacity" }

func (f capacityFlag) String() string {
	if f.c == nil || *f.c == (drivers.Capacity{}) {
		return ""
	}
	var parts []string
	if f.c.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory=%d", f.c.MemoryBytes))
	}
	if f.c.CPUMillis > 0 {
		parts = append(parts, fmt.Sprintf("cpus=%dm", f.c.CPUMillis))
	}
	if f.c.DiskBytes > 0 {
		parts = append(parts, fmt.Sprintf("disk=%d", f.c.DiskBytes))
	}
	return strings.Join(parts, ",")
}

func (f capacityFlag) Set(s string) error {
	var c drivers.Capacity
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		var err error
		switch {
		case !ok:
			return fmt.Errorf("%q: want memory=SIZE,cpus=N,disk=SIZE", kv)
		case k == "memory":
			c.MemoryBytes, err = units.ParseSize(v)
		case k == "cpus":
			c.CPUMillis, err = units.ParseCPUs(v)
		case k == "disk":
			c.DiskBytes, err = units.ParseSize(v)
		default:
			return fmt.Errorf("%q: unknown resource %q (memory, cpus, disk)", kv, k)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	*f.c = c
	return nil
}

// addKubernetesFlags adds the flags of an agent that serves a cluster.
func addKubernetesFlags(f *pflag.FlagSet, k *catalog.KubernetesConfig) {
	f.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "serve this Kubernetes cluster as the node (runs only the kubernetes driver unless --drivers says otherwise)")
	f.StringVar(&k.NamespacePrefix, "namespace-prefix", k.NamespacePrefix, "the node's guests live in namespace PREFIX+NODE")
	f.StringVar(&k.StorageClass, "storage-class", k.StorageClass, "storage class of guest volume claims (default: the cluster's)")
	f.StringVar(&k.IngressClass, "ingress-class", k.IngressClass, "IngressClass of the Ingresses made for http routes (default: the cluster's default or only class; none: the agent's proxy serves routes)")
	f.Var(capacityFlag{&k.Capacity}, "capacity", "node capacity instead of the sum of the cluster nodes' allocatable resources, e.g. memory=8G,cpus=4,disk=100G")
}

// k8sAgentConfig is the agent config file add-k8s writes: keys are the
// agent's flag names.
type k8sAgentConfig struct {
	Name            string   `yaml:"name"`
	StateDir        string   `yaml:"state_dir"`
	Coordinator     []string `yaml:"coordinator"`
	JoinToken       string   `yaml:"join_token"`
	APIAddr         string   `yaml:"api_addr"`
	AdvertiseAddr   string   `yaml:"advertise_addr,omitempty"`
	Drivers         []string `yaml:"drivers"`
	Kubeconfig      string   `yaml:"kubeconfig"`
	NamespacePrefix string   `yaml:"namespace_prefix"`
	StorageClass    string   `yaml:"storage_class,omitempty"`
	IngressClass    string   `yaml:"ingress_class,omitempty"`
	ProxyHTTPAddr   string   `yaml:"proxy_http_addr,omitempty"`
	Capacity        string   `yaml:"capacity,omitempty"`
	GitAddr         string   `yaml:"git_addr"`
	GossipAddr      string   `yaml:"gossip_addr"`
	MetricsAddr     string   `yaml:"metrics_addr"`
}

func newNodeAddK8sCmd(g *cli.Globals) *cobra.Command {
	var (
		k         = catalog.KubernetesConfig{NamespacePrefix: "corpus-"}
		stateDir  string
		apiAddr   string
		advertise string
		out       string
		proxyAddr string
		metrics   string
	)
	cmd := &cobra.Command{
		Use:   "add-k8s NAME --kubeconfig FILE [--namespace-prefix corpus-]",
		Short: "Register a Kubernetes cluster as a node, run by an agent of its own",
		Long: `Checks that the cluster answers with the kubeconfig's credentials, reads its
capacity (the sum of its schedulable nodes' allocatable resources, or
--capacity), creates a join token and writes the config file of the agent
that will serve the cluster: it runs only the kubernetes driver, with no
bridge, NAT or loop volumes of its own. http routes to its guests become
Ingress objects when the cluster has an IngressClass (--ingress-class, or
the cluster's default or only class); other routes go through the
agent's proxy to the guests' Services (cluster IP and port). Start that agent with
'corpus agent --config FILE'; the node appears once it has enrolled.`,
		Example: `  corpus node add-k8s k8s-eu --kubeconfig ~/.kube/eu.yaml --namespace-prefix corpus-
  corpus node add-k8s lab --kubeconfig lab.yaml --capacity memory=8G,cpus=4 --config-out lab-agent.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := names.Validate("node", name); err != nil {
				return err
			}
			if k.Kubeconfig == "" {
				return errors.New("--kubeconfig is required")
			}
			kc, err := filepath.Abs(k.Kubeconfig)
			if err != nil {
				return err
			}
			built, err := catalog.New("kubernetes", catalog.Config{Node: name, Kubernetes: catalog.KubernetesConfig{
				Kubeconfig: kc, NamespacePrefix: k.NamespacePrefix, Capacity: k.Capacity, IngressClass: k.IngressClass}})
			if err != nil {
				return err
			}
			d, ok := built.(interface {
				drivers.Driver
				Namespace() string
				Capacity(context.Context) (drivers.Capacity, error)
			})
			if !ok {
				return fmt.Errorf("the kubernetes driver does not say its namespace")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			fp := d.Fingerprint(ctx)
			if !fp.Healthy {
				return fmt.Errorf("cluster of %s: %s", kc, fp.Detail)
			}
			capacity, err := d.Capacity(ctx)
			if err != nil {
				return err
			}
			if capacity.MemoryBytes == 0 || capacity.CPUMillis == 0 {
				return fmt.Errorf("the cluster reports no allocatable memory or CPU (no schedulable nodes?); give the node's share with --capacity memory=8G,cpus=4")
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			tok, err := c.Nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{TtlSeconds: 24 * 3600}))
			if err != nil {
				return fmt.Errorf("creating a join token: %w", err)
			}
			e, err := g.Endpoint()
			if err != nil {
				return err
			}
			addr := strings.TrimPrefix(e.Address, "https://")
			if stateDir == "" {
				stateDir = "/var/lib/corpus/agent-" + name
			}
			if out == "" {
				out = "/etc/corpus/agent-" + name + ".yaml"
			}
			cfg := k8sAgentConfig{
				Name: name, StateDir: stateDir, Coordinator: []string{addr},
				JoinToken: tok.Msg.Token, APIAddr: apiAddr, AdvertiseAddr: advertise, Drivers: []string{"kubernetes"},
				Kubeconfig: kc, NamespacePrefix: k.NamespacePrefix, StorageClass: k.StorageClass,
				IngressClass: k.IngressClass, ProxyHTTPAddr: proxyAddr, MetricsAddr: metrics,
				Capacity: capacityFlag{&k.Capacity}.String(),
			}
			b, err := yaml.Marshal(cfg)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			// The file holds a join token: readable by its owner only.
			if err := os.WriteFile(out, b, 0o600); err != nil {
				return fmt.Errorf("writing the agent config: %w", err)
			}
			if g.JSON() {
				return g.PrintJSONValue(map[string]any{
					"node": name, "namespace": d.Namespace(), "kubernetes_version": fp.Attributes["kubernetes.version"],
					"capacity": capacity, "agent_config": out,
				})
			}
			fmt.Fprintf(g.Stdout(), "cluster %s (Kubernetes %s) checked: namespace %s, capacity %d MiB memory, %.2f cpus\n",
				fp.Attributes["kubernetes.host"], fp.Attributes["kubernetes.version"], d.Namespace(), capacity.MemoryBytes>>20, float64(capacity.CPUMillis)/1000)
			fmt.Fprintf(g.Stdout(), "agent config written to %s; start the node's agent with:\n  corpus agent --config %s\n", out, out)
			if out == "/etc/corpus/agent-"+name+".yaml" {
				fmt.Fprintf(g.Stdout(), "or as a service: systemctl enable --now corpus-agent-k8s@%s\n", name)
			}
			return nil
		},
	}
	f := cmd.Flags()
	addKubernetesFlags(f, &k)
	f.StringVar(&stateDir, "state-dir", "", "the agent's state folder (default /var/lib/corpus/agent-NAME)")
	f.StringVar(&apiAddr, "api-addr", "127.0.0.1:7412", "listen address of the agent's own API")
	f.StringVar(&advertise, "advertise-addr", "", "address coordinators use to reach the agent (default: --api-addr)")
	f.StringVar(&proxyAddr, "proxy-http-addr", "", "listen address of the agent's proxy, which serves routes no Ingress serves (default the agent's, :80)")
	f.StringVar(&metrics, "metrics-addr", defaultK8sAgentMetricsAddr, "the agent's Prometheus metrics listen address (empty: off); give each agent on a host its own")
	f.StringVar(&out, "config-out", "", "where to write the agent's config file (default /etc/corpus/agent-NAME.yaml)")
	return cmd
}
