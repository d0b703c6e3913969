package catalog

import (
	"path/filepath"

	"corpus/drivers"
	"corpus/drivers/kubernetes"
	"corpus/drivers/lxc"
)

// The built-in drivers.
func init() {
	register("lxc", func(c Config) (drivers.Driver, error) {
		return lxc.New(lxc.Config{Path: filepath.Join(c.StateDir, "lxc"), Logger: c.Logger})
	})
	registerOptIn("kubernetes", func(c Config) (drivers.Driver, error) {
		k := c.Kubernetes
		return kubernetes.New(kubernetes.Config{
			Kubeconfig: k.Kubeconfig, NamespacePrefix: k.NamespacePrefix, Node: c.Node,
			StorageClass: k.StorageClass, Capacity: k.Capacity, Logger: c.Logger,
		})
	})
}
