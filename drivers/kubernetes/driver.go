package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"corpus/drivers"
)

// Config configures a driver instance.
type Config struct {
	// Kubeconfig is the kubeconfig file of the cluster; its current
	// context is used. Ignored when REST is set.
	Kubeconfig string
	// REST, when set, is the cluster's client configuration (tests, or a
	// caller that built one itself).
	REST *rest.Config
	// NamespacePrefix starts every namespace the driver uses.
	NamespacePrefix string
	// Node is the corpus node's name; the driver's namespace is
	// NamespacePrefix + Node.
	Node string
	// StorageClass names the class of guest volumes' claims; empty uses
	// the cluster's default class.
	StorageClass string
	// IngressClass names the IngressClass of the Ingress objects made for
	// http routes; empty picks the cluster's default class, or its only
	// one; "none" makes no Ingress (the agent's proxy serves every route).
	IngressClass string
	// Capacity, when it has any amount, is reported instead of the sum of
	// the cluster nodes' allocatable resources (a cluster with no nodes
	// yet, or a share of a bigger one).
	Capacity drivers.Capacity
	// QPS and Burst bound the driver's request rate to the API server
	// (client-go's defaults, 5 and 10, make a 500-guest resync take
	// minutes). Defaults: 200 and 400.
	QPS   float32
	Burst int
	// Timeout bounds one API request; default 30s.
	Timeout time.Duration
	// Keychain gives the credentials of the registries of the guests'
	// images, which reach the kubelet as image pull secrets; nil pulls
	// anonymously.
	Keychain authn.Keychain
	// CredentialsTTL is how long the driver reuses the keychain's answer
	// for a registry. The agent reconciles every guest at every pass,
	// and each reconcile of a guest of this driver converges its pull
	// secret: without it, a restarted agent with 500 guests asks a
	// coordinator 500 times. A new password or a logout reaches the
	// cluster within this long (and the next pass). 0 is 10s; negative
	// asks at every Create.
	CredentialsTTL time.Duration
	Logger         *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.REST == nil && c.Kubeconfig == "" {
		errs = append(errs, errors.New("no kubeconfig given"))
	}
	if c.NamespacePrefix == "" {
		errs = append(errs, errors.New("namespace prefix is empty"))
	}
	if msgs := validation.IsDNS1123Label(c.NamespacePrefix + c.Node); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q (prefix + node name): %s", c.NamespacePrefix+c.Node, strings.Join(msgs, "; ")))
	}
	if c.IngressClass != "" && c.IngressClass != NoIngress && len(validation.IsDNS1123Subdomain(c.IngressClass)) > 0 {
		errs = append(errs, fmt.Errorf("ingress class %q is not a DNS name", c.IngressClass))
	}
	if c.Capacity.MemoryBytes < 0 || c.Capacity.CPUMillis < 0 || c.Capacity.DiskBytes < 0 {
		errs = append(errs, errors.New("capacity must not be negative"))
	}
	return errors.Join(errs...)
}

// Driver runs guests as Deployments (StatefulSets with a volume) of one
// namespace of a cluster.
type Driver struct {
	cfg    Config
	ns     string
	client *clients
	rest   *rest.Config
	logger *slog.Logger
	// nsReady is set once the namespace is known to exist, and cleared
	// when a write finds it gone. nsMu lets one caller make it while the
	// others wait: at an agent's start every guest's worker asks at once,
	// and each asking the API server would spend the client's rate limit
	// on the same two requests before any guest's own.
	nsReady atomic.Bool
	nsMu    sync.Mutex

	capMu   sync.Mutex
	capLast drivers.Capacity
	capAt   time.Time

	classMu   sync.Mutex
	classLast string
	classAt   time.Time

	pullMu sync.Mutex
	pulls  map[string]bool // registries with a pull secret; nil until listed

	credMu sync.Mutex
	creds  map[string]credentials // the keychain's answers, by registry

	viewMu    sync.Mutex
	v         *view // nil until first used
	stop      chan struct{}
	closeOnce sync.Once
}

var (
	_ drivers.Driver           = (*Driver)(nil)
	_ drivers.CapacityReporter = (*Driver)(nil)
	_ drivers.RoutePublisher   = (*Driver)(nil)
	_ drivers.RouteTargeter    = (*Driver)(nil)
)

// New builds a driver for the cluster cfg names. It does not contact the
// cluster: an unreachable cluster shows in Fingerprint.
func New(cfg Config) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes driver config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.QPS == 0 {
		cfg.QPS = 200
	}
	if cfg.Burst == 0 {
		cfg.Burst = 400
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.CredentialsTTL == 0 {
		cfg.CredentialsTTL = 10 * time.Second
	}
	rc := cfg.REST
	if rc == nil {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst, rc.Timeout = cfg.QPS, cfg.Burst, cfg.Timeout
	rc.UserAgent = "corpus-agent"
	client, err := newClients(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Driver{
		cfg: cfg, ns: cfg.NamespacePrefix + cfg.Node, client: client, rest: rc, stop: make(chan struct{}),
		logger: cfg.Logger.With("component", "driver", "driver", "kubernetes"),
	}, nil
}

// Name returns "kubernetes".
func (*Driver) Name() string { return "kubernetes" }

// Namespace is the namespace the driver's guests live in.
func (d *Driver) Namespace() string { return d.ns }

// Capabilities: exec through the API server, resources change online (a
// rollout), no host network or host volumes, Create converges.
func (*Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Exec: true, ExecStreams: true, ExecTTYStream: true, Volumes: drivers.KeptVolumes, Converge: true}
}

// Fingerprint reports the driver healthy when the API server answers and
// the driver may read its namespace's Deployments.
func (d *Driver) Fingerprint(ctx context.Context) drivers.Fingerprint {
	v, err := d.client.Discovery().ServerVersion()
	if err != nil {
		return drivers.Fingerprint{Detail: fmt.Sprintf("api server unreachable: %v", err)}
	}
	if _, err := d.client.AppsV1().Deployments(d.ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return drivers.Fingerprint{Detail: fmt.Sprintf("listing deployments in %s: %v", d.ns, err)}
	}
	return drivers.Fingerprint{Healthy: true, Attributes: map[string]string{
		"kubernetes.version":   v.GitVersion,
		"kubernetes.host":      d.rest.Host,
		"kubernetes.namespace": d.ns,
	}}
}

// Capacity is the configured capacity, or the sum of the allocatable
// resources of the cluster's schedulable nodes, read at most every
// capacityTTL (the agent asks at every report).
func (d *Driver) Capacity(ctx context.Context) (drivers.Capacity, error) {
	if c := d.cfg.Capacity; c.MemoryBytes > 0 || c.CPUMillis > 0 || c.DiskBytes > 0 {
		return c, nil
	}
	d.capMu.Lock()
	defer d.capMu.Unlock()
	if time.Since(d.capAt) < capacityTTL {
		return d.capLast, nil
	}
	c, err := d.readCapacity(ctx)
	if err != nil {
		return drivers.Capacity{}, err
	}
	d.capLast, d.capAt = c, time.Now()
	return c, nil
}

const capacityTTL = 30 * time.Second

func (d *Driver) readCapacity(ctx context.Context) (drivers.Capacity, error) {
	nodes, err := d.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return drivers.Capacity{}, fmt.Errorf("listing cluster nodes: %w", err)
	}
	var c drivers.Capacity
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		a := n.Status.Allocatable
		c.MemoryBytes += a.Memory().Value()
		c.CPUMillis += a.Cpu().MilliValue()
		c.DiskBytes += a.StorageEphemeral().Value()
	}
	return c, nil
}

// ensureNamespace makes the driver's namespace when it is missing.
func (d *Driver) ensureNamespace(ctx context.Context) error {
	if d.nsReady.Load() {
		return nil
	}
	d.nsMu.Lock()
	defer d.nsMu.Unlock()
	if d.nsReady.Load() {
		return nil // made while this caller waited
	}
	_, err := d.client.CoreV1().Namespaces().Get(ctx, d.ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns, Labels: map[string]string{LabelManagedBy: managedBy}}}
		if _, err := d.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", d.ns, err)
		}
		d.logger.Info("namespace created", "namespace", d.ns)
	case err != nil:
		return fmt.Errorf("reading namespace %s: %w", d.ns, err)
	}
	// Pods of a namespace need its default service account; a cluster's
	// controller manager makes it, a bare API server does not.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: d.ns}}
	if _, err := d.client.CoreV1().ServiceAccounts(d.ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the default service account of %s: %w", d.ns, err)
	}
	d.nsReady.Store(true)
	return nil
}
