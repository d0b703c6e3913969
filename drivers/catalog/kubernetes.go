//go:build !nokubernetes

package catalog

import (
	"corpus/drivers"
	"corpus/drivers/kubernetes"
)

// The kubernetes driver, opt-in. A binary built with -tags nokubernetes
// leaves it out, and its hundreds of client packages with it (test/run
// builds the VM image builder so).
func init() {
	registerOptIn("kubernetes", func(c Config) (drivers.Driver, error) {
		k := c.Kubernetes
		return kubernetes.New(kubernetes.Config{
			Kubeconfig: k.Kubeconfig, NamespacePrefix: k.NamespacePrefix, Node: c.Node,
			StorageClass: k.StorageClass, IngressClass: k.IngressClass, Capacity: k.Capacity, Logger: c.Logger,
			Keychain: c.Keychain,
		})
	})
}
