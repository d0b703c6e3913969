// Package catalog lists the built-in drivers and builds them by name. The
// list itself is in builtin.go; registering a name twice panics.
package catalog

import (
	"fmt"
	"log/slog"
	"sort"

	"github.com/google/go-containerregistry/pkg/authn"

	"corpus/drivers"
	"corpus/images/oci"
)

// Config is what every driver factory gets.
type Config struct {
	// StateDir is the agent's state folder; a driver keeps its files in
	// its own sub-folder of it.
	StateDir string
	// Node is the agent's node name.
	Node       string
	Kubernetes KubernetesConfig
	Logger     *slog.Logger
	// ImageCacheMax caps the node's image cache: a size ("20G"), a share
	// of its disk ("25%") or "0" for none; empty is the driver's default
	// (lxc.DefaultImageCacheMax).
	ImageCacheMax string
	// Keychain gives the drivers that pull OCI images the credentials
	// of registries (the agent's, which asks its coordinators); nil pulls
	// anonymously.
	Keychain authn.Keychain
	// Images is the node's OCI layer store (ImageStore), which the
	// drivers that pull share with the agent's deploys; nil makes each
	// its own.
	Images *oci.Store
}

// KubernetesConfig configures the kubernetes driver: the cluster an agent
// serves as its node.
type KubernetesConfig struct {
	// Kubeconfig is the cluster's kubeconfig file.
	Kubeconfig string
	// NamespacePrefix starts the namespace of the node's guests, which is
	// the prefix followed by the node name.
	NamespacePrefix string
	// StorageClass of guest volume claims; empty for the cluster default.
	StorageClass string
	// IngressClass of the Ingresses of http routes; empty detects the
	// cluster's, "none" makes none (the agent's proxy serves routes).
	IngressClass string
	// Capacity replaces the sum of the cluster nodes' allocatable
	// resources when it has any amount.
	Capacity drivers.Capacity
}

// Factory builds one driver instance.
type Factory func(Config) (drivers.Driver, error)

var (
	factories = map[string]Factory{}
	// optIn are drivers an agent runs only when asked by name, because
	// they need configuration of their own.
	optIn = map[string]bool{}
)

func register(name string, f Factory) {
	if _, dup := factories[name]; dup {
		panic("catalog: driver " + name + " registered twice")
	}
	factories[name] = f
}

// registerOptIn registers a driver that Defaults leaves out.
func registerOptIn(name string, f Factory) {
	register(name, f)
	optIn[name] = true
}

// Defaults returns the driver names an agent runs when none are given:
// every built-in driver that needs no configuration of its own, sorted.
func Defaults() []string {
	var out []string
	for _, n := range Names() {
		if !optIn[n] {
			out = append(out, n)
		}
	}
	return out
}

// Names returns the built-in driver names, sorted.
func Names() []string {
	out := make([]string, 0, len(factories))
	for n := range factories {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds the named driver.
func New(name string, cfg Config) (drivers.Driver, error) {
	f, ok := factories[name]
	if !ok {
		return nil, fmt.Errorf("driver %q: %w (built in: %v)", name, drivers.ErrNotSupported, Names())
	}
	return f(cfg)
}
