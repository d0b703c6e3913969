package libvirt

import "log/slog"

// Name is the driver's registered name.
const Name = "libvirt"

// Defaults for Config.
const (
	DefaultURI    = "qemu:///system"
	DefaultSocket = "/run/libvirt/libvirt-sock"
	// DefaultDir is under libvirt's own image folder, which QEMU reaches.
	DefaultDir = "/var/lib/libvirt/images/corpus"
)

// Config configures one libvirt driver instance.
type Config struct {
	// URI is the hypervisor libvirtd is asked for: DefaultURI for real
	// VMs, "test:///default" for libvirt's own test hypervisor.
	URI string
	// Socket is libvirtd's unix socket; empty means DefaultSocket.
	Socket string
	// Dir holds the guests' disks and console logs. The driver owns it
	// and creates it when it first needs it. libvirt runs QEMU as its own
	// unprivileged user, so Dir and ImageDir must be reachable by it: not
	// under the agent's state folder, which only root may enter.
	Dir string
	// ImageDir holds the built images; empty means <Dir>/images. Several
	// instances may share one.
	ImageDir string
	// Instance tells this driver's domains from other instances' on the
	// same libvirtd (the agent gives its state folder); empty means Dir.
	Instance string
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
}
