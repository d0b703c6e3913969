// Package drivers defines the contract between the node agent and the code
// that runs guests of one kind (LXC containers, libvirt VMs, Kubernetes
// workloads). The agent imports only this package; implementations live in
// sub-packages and are listed in drivers/catalog.
//
// A driver is addressed by guest name: corpus guest names are unique in the
// cluster and are valid DNS labels, so every driver can use them directly as
// its own instance names. The guest's ID is stored beside the instance so a
// replacement guest with a reused name is told apart from the old one.
package drivers

import (
	"context"
	"io"
	"net/netip"
	"os"
	"time"

	corpusv1 "corpus/proto/corpus/v1"
)

// Driver runs guests of one kind on one host. Every method is safe for
// concurrent use on different guests; callers serialise operations on one
// guest. Methods return ErrNotFound (possibly wrapped) when the named guest
// does not exist on the host.
type Driver interface {
	// Name is the driver's registered name, e.g. "lxc".
	Name() string

	// Capabilities describes what the driver can do. It does not change
	// while the driver runs.
	Capabilities() Capabilities

	// Fingerprint reports the driver's current health and attributes. It
	// is called periodically; the result may change over time.
	Fingerprint(ctx context.Context) Fingerprint

	// Create makes a stopped guest from spec. If a guest of that name
	// already exists with the same ID, Create returns nil and changes
	// nothing; with another ID it returns ErrExists. Long work (building
	// an image) is reported through progress, which may be nil.
	Create(ctx context.Context, spec GuestSpec, progress ProgressFunc) error

	// Start starts a created guest. Starting a running guest is a no-op.
	// The guest must keep running when the calling process exits.
	Start(ctx context.Context, name string) error

	// Stop stops a guest, cleanly within timeout and forcibly after it.
	// Stopping a stopped guest is a no-op.
	Stop(ctx context.Context, name string, timeout time.Duration) error

	// Destroy stops (forcibly) and removes a guest and everything the
	// driver made for it. Destroying a missing guest returns nil.
	Destroy(ctx context.Context, name string) error

	// Inspect returns the observed state of one guest.
	Inspect(ctx context.Context, name string) (GuestStatus, error)

	// List returns every guest this driver instance manages that really
	// exists on the host, whatever state it is in. It never includes
	// guests of another driver instance (another lxcpath, say) or the
	// driver's own image caches.
	List(ctx context.Context) ([]GuestStatus, error)

	// Exec runs argv inside a running guest, wiring the request's streams,
	// and returns the command's exit code. An error means the command could
	// not be run at all; a command that ran and failed returns its non-zero
	// code and a nil error.
	Exec(ctx context.Context, name string, req ExecRequest) (int, error)
}

// ProgressFunc receives one line describing long work in progress.
type ProgressFunc func(msg string)

// Capabilities are a driver's abilities as data; callers never switch on a
// driver's name.
type Capabilities struct {
	// Exec is true when Exec is supported.
	Exec bool `json:"exec"`
	// ExecStreams is true when Exec passes a command's output on while
	// it runs; without it the output comes when the command ends (a VM's
	// guest agent), so long-running readers run in short slices.
	ExecStreams bool `json:"exec_streams,omitempty"`
	// ExecTerminal is true when Exec takes ExecRequest.Terminal.
	ExecTerminal bool `json:"exec_terminal,omitempty"`
	// ExecTTYStream is true when Exec takes ExecRequest.TTY.
	ExecTTYStream bool `json:"exec_tty_stream,omitempty"`
	// Images lists the image names the driver can build or fetch by itself.
	Images []string `json:"images"`
	// OCIImages is true when the driver also takes OCI image references
	// (internal/imageref) and pulls them itself.
	OCIImages bool `json:"oci_images,omitempty"`
	// PackageImages lists the images whose guests may ask for
	// GuestSpec.Packages.
	PackageImages []string `json:"package_images,omitempty"`
	// HostNetwork is true when guests join the agent's bridge and reach
	// the outside through the node's NAT and proxy; an agent whose
	// drivers all lack it runs no bridge, NAT, proxy or resolver.
	HostNetwork bool `json:"host_network"`
	// Volumes is how the driver's guests get their volume.
	Volumes VolumeMode `json:"volumes,omitempty"`
	// IDRanges is how many ranges of IDRangeSize user and group ids the
	// host keeps for guests of their own beyond the shared one (range
	// 0): GuestSpec.IDRange takes 1..IDRanges. 0 when guests share one
	// range, or have no user namespace of the host's ids (VMs, pods).
	IDRanges uint32 `json:"id_ranges,omitempty"`
	// Converge is true when Create, called for an existing guest of the
	// same ID, makes the guest match spec again (a changed spec, or an
	// object edited or deleted behind the driver's back) instead of
	// changing nothing. The agent then calls Create on every pass.
	Converge bool `json:"converge"`
}

// CapacityReporter is a driver whose guests do not use the agent host's
// resources (a remote cluster). The agent reports Capacity as its node's
// capacity instead of the host's.
type CapacityReporter interface {
	Capacity(ctx context.Context) (Capacity, error)
}

// IDRangeSize is how many user (and group) ids one id range holds: a
// guest's ids 0-65535.
const IDRangeSize = 65536

// IDRemapper is a driver whose guests' ids live in ranges of the host's
// (Capabilities.IDRanges). The agent calls RemapIDs before every start
// of a guest with the range the coordinator gave it.
type IDRemapper interface {
	// RemapIDs moves the stopped guest name to id range r: its files
	// (its root file system now, its volumes at the latest when it
	// starts) are shifted to the range's ids and its user namespace
	// maps to it from its next start. A guest
	// already there, or privileged, is left as it is; a running one in
	// another range is ErrRunning (wrapped). It is idempotent, and an
	// interrupted move is finished by the next call.
	RemapIDs(ctx context.Context, name string, r uint32) error
}

// VolumeMode is how a driver's guests get their volume
// (Capabilities.Volumes).
type VolumeMode string

// Volume modes.
const (
	// NoVolumes: the driver refuses guests with a volume (and the
	// scheduler places none there).
	NoVolumes VolumeMode = ""
	// HostVolumes: a volume is a folder of the agent's host, kept by the
	// agent's volume backend and bind-mounted (GuestSpec.Mounts).
	HostVolumes VolumeMode = "host"
	// BlockVolumes: a volume is a block device of the agent's host
	// holding an ext4 file system, kept by the agent's volume backend
	// (GuestSpec.BlockVolumes), which the guest mounts itself: a VM's
	// virtio disk. The host must never mount such a volume while its
	// guest may use it. The driver is a BlockVolumeDriver, and a volume
	// grows while its guest runs through GrowVolume.
	BlockVolumes VolumeMode = "block"
	// KeptVolumes: the driver keeps volumes itself (GuestSpec.Volume);
	// it is a VolumeKeeper.
	KeptVolumes VolumeMode = "kept"
)

// AgentKept says whether the agent's volume backend keeps volumes of
// this mode: an agent whose drivers all say no keeps no backend.
func (m VolumeMode) AgentKept() bool { return m == HostVolumes || m == BlockVolumes }

// VolumeKeeper is a driver that keeps guest volumes itself
// (Capabilities.Volumes KeptVolumes): the agent asks it how a volume is and has it
// delete one, instead of using its own volume backend.
type VolumeKeeper interface {
	// ObserveVolume returns the state of the named volume; ErrNotFound
	// when the driver has no such volume (yet).
	ObserveVolume(ctx context.Context, name string) (VolumeStatus, error)
	// DeleteVolume deletes the named volume and its data; deleting a
	// missing volume returns nil.
	DeleteVolume(ctx context.Context, name string) error
}

// BlockVolumeDriver is a driver that gives guests their volumes as block
// devices (Capabilities.Volumes BlockVolumes). The agent keeps the
// volumes (makes their file systems, attaches their devices); the driver
// hands them to guests and has guests grow their file systems.
type BlockVolumeDriver interface {
	// AttachVolume makes the named guest's definition carry vol as a
	// disk, with vol.Device as its source. It is idempotent: a disk
	// already there with that device changes nothing; one with another
	// device (the host's loop devices were numbered anew) is pointed at
	// vol.Device, which takes effect at the guest's next start.
	AttachVolume(ctx context.Context, name string, vol BlockVolume) error
	// GrowVolume makes the running guest see vol's device at size bytes
	// and grow the volume's file system to it, online. The device must
	// have size bytes already. It returns the file system's size as the
	// guest reports it once grown; ErrNotRunning when the guest is not
	// running (the guest grows the file system when it boots), and
	// ErrNotReady when the guest cannot be asked yet (its agent does not
	// answer while it boots). Calling it again with the same size
	// changes nothing.
	GrowVolume(ctx context.Context, name string, vol BlockVolume, size int64) (int64, error)
	// VolumeUsage returns what the running guest sees of vol's file
	// system (statfs inside the guest): the host's view of a file system
	// another kernel has mounted lags behind. ErrNotRunning and
	// ErrNotReady as for GrowVolume; ErrNotFound when the guest has not
	// mounted the volume.
	VolumeUsage(ctx context.Context, name string, vol BlockVolume) (VolumeUsage, error)
}

// VolumeUsage is a volume's file system as its guest sees it.
type VolumeUsage struct {
	// SizeBytes is the file system's size as df shows it (its own
	// metadata left out); UsedBytes and FreeBytes as df shows them.
	SizeBytes, UsedBytes, FreeBytes int64
}

// BlockVolume is a guest volume given to the guest as a block device.
type BlockVolume struct {
	// Name is the volume's name, unique in the cluster (a DNS label).
	Name string
	// Device is the host block device holding the volume's ext4 file
	// system, e.g. /dev/loop3.
	Device string
	// Path is where the guest mounts the volume.
	Path string
}

// VolumeStatus is what a driver observes of one volume it keeps.
type VolumeStatus struct {
	// Ready is true when the volume can be mounted.
	Ready     bool
	SizeBytes int64
	// Message explains a volume that is not ready ("claim Pending").
	Message string
}

// Capacity is an amount of resources a driver offers.
type Capacity struct {
	MemoryBytes int64 `json:"memory_bytes"`
	CPUMillis   int64 `json:"cpu_millis"`
	DiskBytes   int64 `json:"disk_bytes"`
}

// Fingerprint is the health and the attributes of a driver on this host.
type Fingerprint struct {
	Healthy bool `json:"healthy"`
	// Detail explains an unhealthy driver in one line ("lxc-dev missing").
	Detail string `json:"detail,omitempty"`
	// Attributes are facts such as "lxc.version" or "cgroup.version".
	Attributes map[string]string `json:"attributes,omitempty"`
}

// GuestSpec is what a driver needs to create a guest.
type GuestSpec struct {
	// ID is the cluster-wide, never reused identity of the guest.
	ID string
	// Name is the guest's name, a DNS label; drivers use it as instance name.
	Name string
	// Image names the root file system, e.g. "busybox" or "debian/bookworm".
	Image string
	// Packages are Debian packages installed into the image, for images
	// in Capabilities.PackageImages only: the driver builds the image
	// with them once and shares it between the guests asking for the
	// same set. Sorted, without duplicates.
	Packages []string
	// Command replaces the OCI image's entrypoint and Args its cmd, as a
	// Kubernetes container's command and args do (a Command without Args
	// runs without the image's cmd). Drivers refuse them for images that
	// are not OCI images (ErrInvalidSpec). Left out of the spec's JSON
	// when empty: a driver's hash of a spec made before they existed
	// stays what it was.
	Command []string `json:",omitempty"`
	Args    []string `json:",omitempty"`
	// MemoryBytes is the memory limit; 0 means no limit.
	MemoryBytes int64
	// CPUMillis is the CPU limit in thousandths of a core; 0 means no limit.
	CPUMillis int64
	// DiskBytes bounds what the guest writes to its root file system; 0
	// means no limit. Drivers that cannot bound it say so in their logs.
	DiskBytes int64
	// Env is set for the guest's init and for Exec.
	Env map[string]string
	// Network attaches the guest to the node's guest network; nil means
	// the guest has loopback only.
	Network *Network
	// Mounts are host folders bound into the guest (its volume); only
	// for drivers whose Capabilities.Volumes is HostVolumes.
	Mounts []Mount
	// BlockVolumes are block devices given to the guest (its volume);
	// only for drivers whose Capabilities.Volumes is BlockVolumes.
	BlockVolumes []BlockVolume
	// Volume is the guest's volume for drivers that store volumes
	// themselves (KeptVolumes); nil without one.
	Volume *Volume
	// Ports are the guest ports the guest publishes.
	Ports []Port
	// IDRange is the range of the host's ids the guest's user namespace
	// maps its ids 0-65535 to, for drivers with Capabilities.IDRanges:
	// 1..IDRanges is a range of the guest's own, unique among the
	// node's guests (the coordinator gives it at placement); 0 is the
	// range every guest without one shares. Ignored for privileged
	// guests and by drivers without ranges.
	IDRange uint32
	// Privileged runs the guest without a user namespace: its root is
	// the host's root. Only for drivers that confine guests in one (LXC);
	// the API grants it to ops alone.
	Privileged bool
	// Boot, for a guest that runs a project's processes, says how the
	// process supervisor starts with the guest; nil for other guests.
	// Drivers whose guests have an init of their own (system containers,
	// VMs) ignore it: the agent starts the supervisor through exec. A
	// driver whose guests run an image's command instead (Kubernetes)
	// runs Boot.Command as the guest's main command.
	Boot *Boot
}

// Boot is how a guest's process supervisor starts as the guest's main
// command: the platform then restarts it when it dies, and counts the
// restarts.
type Boot struct {
	// Command is the main command.
	Command []string
	// Keep are folders of the guest that outlive a restart of Command
	// (a container's file system is new at each restart): the
	// supervisor, its state and the project's tree. They do not outlive
	// the guest's replacement.
	Keep []string
}

// Volume is persistent storage a driver keeps for a guest. It outlives
// the guest: Destroy leaves it, so it can be bound again.
type Volume struct {
	// Name is the volume's name, unique in the cluster (a DNS label).
	Name string
	// SizeBytes is the desired size; it may grow, never shrink.
	SizeBytes int64
	// Path is where the volume appears inside the guest.
	Path string
}

// Port is a guest port published by the guest.
type Port struct {
	// GuestPort is the port inside the guest.
	GuestPort int
	// HostPort is the port on the node (NAT) or on the guest's service.
	HostPort int
	// Protocol is "tcp" or "udp".
	Protocol string
}

// Mount binds a host folder at an absolute path inside the guest.
type Mount struct {
	Source string
	Target string
}

// Network is a guest's place on its node's guest network: a static
// address on the agent's bridge, the bridge's address as gateway. It is
// fixed when the guest is created.
type Network struct {
	// Bridge is the host bridge the guest's interface joins.
	Bridge string
	// Address is the guest's address with the subnet's prefix length.
	Address netip.Prefix
	// Gateway is the node's address on the bridge.
	Gateway netip.Addr
	// MAC is the interface's hardware address; empty lets the driver pick.
	MAC string
	// HostInterface names the node's end of the guest's link (at most 15
	// bytes), so the agent can find it again; empty lets the driver pick.
	HostInterface string
	// Nameservers and Search become the guest's resolver configuration
	// (/etc/resolv.conf); none leaves the image's own.
	Nameservers []netip.Addr
	Search      []string
}

// State is a guest's observed run state.
type State string

// Observed guest states.
const (
	StateStopped  State = "stopped"
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateStopping State = "stopping"
	StateFrozen   State = "frozen"
	StateUnknown  State = "unknown"
)

// GuestStatus is what a driver observes of one guest on the host.
type GuestStatus struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Image string `json:"image"`
	State State  `json:"state"`
	// PID is the guest's init process as seen from the host, 0 if stopped.
	PID int `json:"pid,omitempty"`
	// MemoryBytes and CPUMillis are the limits in force.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	CPUMillis   int64 `json:"cpu_millis,omitempty"`
	// ImageDigest is the digest ("sha256:...") the guest's OCI image
	// reference resolved to when it was created; "" for built images.
	ImageDigest string `json:"image_digest,omitempty"`
	// ImagePorts are the ports the guest's OCI image exposes ("8080/tcp"),
	// sorted; nil for built images and drivers that do not read images.
	ImagePorts []string `json:"image_ports,omitempty"`
	// Address is the guest's configured address ("" without network).
	Address string `json:"address,omitempty"`
	// Message says more about the state when the driver knows more
	// ("0/1 ready; pod api-5d8 Pending: ImagePullBackOff").
	Message string `json:"message,omitempty"`
}

// ExecRequest describes a command to run inside a guest.
type ExecRequest struct {
	Argv []string
	Env  map[string]string
	Dir  string
	// UID and GID run the command as that user inside the guest; 0
	// means root.
	UID, GID int
	Stdin    io.Reader // nil means empty input
	Stdout   io.Writer // nil discards
	Stderr   io.Writer // nil discards
	// Terminal, for drivers with Capabilities.ExecTerminal, is the
	// follower end of a pseudo-terminal the caller opened: the command
	// gets it as its standard input, output and error, and Stdin,
	// Stdout and Stderr are ignored. Making it the command's controlling
	// terminal is the command's business (corpus-supervisor tty does).
	Terminal *os.File
	// TTY, for drivers with Capabilities.ExecTTYStream, asks the guest's
	// side for a terminal of the first size TTY sends (then of every
	// size it sends), passing its input and output through Stdin and
	// Stdout (a Kubernetes exec with a TTY). The channel closes when the
	// session ends.
	TTY <-chan TerminalSize
}

// TerminalSize is a terminal's window size.
type TerminalSize struct {
	Rows, Cols uint16
}

// ConsoleLogger is a driver that keeps what a guest's console shows (its
// init and system's messages) in a file of the host, which the agent
// reads into the guest's log (source "system"). The file may be rotated
// or truncated (a VM's at each start): readers go on from its start then.
type ConsoleLogger interface {
	ConsoleLog(name string) string
}

// Route is a corpus route to a guest of a driver: outside traffic by
// HTTP host name (corpusv1.RouteHTTP) or by node port
// (corpusv1.RouteTCP) to one of the guest's ports.
type Route struct {
	ID         string
	Kind       corpusv1.RouteKind
	Domain     string
	ListenPort int
	GuestID    string
	Guest      string
	GuestPort  int
}

// RoutePublisher is a driver that can publish routes to its guests
// itself, without the agent's proxy (a cluster's Ingress objects, served
// by the cluster's ingress controller).
type RoutePublisher interface {
	// PublishRoutes makes what the driver publishes match routes, every
	// route to a guest of this driver on the node: it makes, changes and
	// removes its own objects. It returns the IDs of the routes it
	// serves; the agent's proxy serves the others. On error the returned
	// set is still what is served as far as the driver knows.
	PublishRoutes(ctx context.Context, routes []Route) (map[string]bool, error)
}

// RouteTargeter is a driver whose guest ports are reached at an address
// of the driver's choosing (a Service's cluster IP) instead of the
// guest's address on the node's network; the agent's proxy sends route
// traffic there.
type RouteTargeter interface {
	// RouteTarget returns host:port where guest name's port guestPort is
	// reached from the agent's host; ErrNotFound when the guest has no
	// such port (yet).
	RouteTarget(ctx context.Context, name string, guestPort int) (string, error)
}
