package lxc

import (
	"log/slog"

	"github.com/google/go-containerregistry/pkg/authn"

	"corpus/images/oci"
)

// Name is the driver's registered name.
const Name = "lxc"

// Config configures one LXC driver instance.
type Config struct {
	// Path is the lxcpath holding this instance's containers. The driver
	// owns it: it creates it when missing and treats every container in
	// it as its own. Two instances must not share a Path.
	Path string
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
	// SubUIDFile and SubGIDFile hold root's subordinate ids, from which
	// unprivileged guests' user namespaces are mapped; /etc/subuid and
	// /etc/subgid when empty (what newuidmap reads).
	SubUIDFile, SubGIDFile string
	// Store, when set, is a folder of the host that keeps a copy of
	// every image built with packages (apt in a chroot: minutes), shared
	// by the host's agents and kept when an agent's state is wiped; a
	// build finds its image there first (a copy: seconds). See
	// store_linux.go.
	Store string
	// InsecureRegistries are the registries (host or host:port) OCI
	// images may be pulled from over plain HTTP; registries on a
	// loopback address always may.
	InsecureRegistries []string
	// RegistryCertsDir holds the certificates of registries with an
	// authority of their own (oci.Store.CertsDir).
	RegistryCertsDir string
	// Keychain gives OCI pulls the credentials of registries; nil pulls
	// anonymously.
	Keychain authn.Keychain
	// OCI is the node's OCI layer store, shared with the agent's deploys
	// from images (its prunes count and remove their layers too); nil
	// makes the driver one in Path/OCIStoreDir from the three fields
	// above.
	OCI *oci.Store
	// ImageCacheMax caps the images the driver keeps (see
	// cache_linux.go): a size ("20G"), a share of the file system
	// holding Path ("25%"), or "0" for no cap; empty is
	// DefaultImageCacheMax. Past it, images no guest uses are removed,
	// least recently used first, after each image built.
	ImageCacheMax string
}

// DefaultImageCacheMax is the image cache's cap when Config names none.
const DefaultImageCacheMax = "25%"

// OCIStoreDir is the folder, inside the driver's lxcpath, of the OCI
// layer store (not Config.Store, which keeps built images for a host);
// a dot keeps it apart from guests.
const OCIStoreDir = ".oci"
