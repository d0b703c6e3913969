package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"

	"corpus/drivers"
	"corpus/drivers/libvirt"
	"corpus/drivers/lxc"
	"corpus/images/oci"
)

// The built-in drivers.
func init() {
	// Root's subordinate ids, which guests' id ranges are cut from, are
	// read from CORPUS_LXC_SUBUID and CORPUS_LXC_SUBGID when set
	// (/etc/subuid and /etc/subgid otherwise); the host's image store
	// (lxc.Config.Store) from CORPUS_LXC_IMAGE_STORE (none when unset).
	// CORPUS_INSECURE_REGISTRIES lists, comma-separated, the registries
	// OCI images may be pulled from over plain HTTP;
	// CORPUS_REGISTRY_CERTS_DIR is the folder of registries' own
	// certificates (RegistryCertsDir).
	register("lxc", func(c Config) (drivers.Driver, error) {
		return lxc.New(lxc.Config{
			Path: filepath.Join(c.StateDir, "lxc"), Logger: c.Logger,
			SubUIDFile: os.Getenv("CORPUS_LXC_SUBUID"), SubGIDFile: os.Getenv("CORPUS_LXC_SUBGID"),
			Store:              os.Getenv("CORPUS_LXC_IMAGE_STORE"),
			InsecureRegistries: InsecureRegistries(),
			RegistryCertsDir:   RegistryCertsDir(),
			ImageCacheMax:      c.ImageCacheMax,
			Keychain:           c.Keychain,
			OCI:                c.Images,
		})
	})
	register("libvirt", newLibvirt)
}

// ImageStore is the node's one OCI layer store, in the LXC driver's
// folder of stateDir (where it always was): the LXC driver's guests and
// the agent's deploys from images pull into it, and the driver's image
// cache counts and prunes it.
func ImageStore(stateDir string, keychain authn.Keychain, log *slog.Logger) *oci.Store {
	return &oci.Store{Root: filepath.Join(stateDir, "lxc", lxc.OCIStoreDir), Insecure: InsecureRegistries(),
		CertsDir: RegistryCertsDir(), Log: log, Keychain: keychain}
}

// InsecureRegistries are the registries OCI images may be pulled from
// over plain HTTP: CORPUS_INSECURE_REGISTRIES, comma-separated.
func InsecureRegistries() []string {
	var insecure []string
	for _, r := range strings.Split(os.Getenv("CORPUS_INSECURE_REGISTRIES"), ",") {
		if r = strings.TrimSpace(r); r != "" {
			insecure = append(insecure, r)
		}
	}
	return insecure
}

// RegistryCertsDir is the folder of the certificates of registries with
// an authority of their own, as Docker's certs.d (oci.Store.CertsDir):
// CORPUS_REGISTRY_CERTS_DIR, by default oci.DefaultCertsDir.
func RegistryCertsDir() string {
	if dir := os.Getenv("CORPUS_REGISTRY_CERTS_DIR"); dir != "" {
		return dir
	}
	return oci.DefaultCertsDir
}

// newLibvirt reads where libvirtd is from the environment:
// CORPUS_LIBVIRT_URI (default qemu:///system), CORPUS_LIBVIRT_SOCKET
// (default /run/libvirt/libvirt-sock), CORPUS_LIBVIRT_DIR (guests'
// disks; default a folder per agent state dir under libvirt.DefaultDir,
// which QEMU can reach, unlike the state dir) and CORPUS_LIBVIRT_IMAGES
// (built images; default shared by the host's agents).
func newLibvirt(c Config) (drivers.Driver, error) {
	state, err := filepath.Abs(c.StateDir)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(state))
	cfg := libvirt.Config{
		URI:      os.Getenv("CORPUS_LIBVIRT_URI"),
		Socket:   os.Getenv("CORPUS_LIBVIRT_SOCKET"),
		Dir:      os.Getenv("CORPUS_LIBVIRT_DIR"),
		ImageDir: os.Getenv("CORPUS_LIBVIRT_IMAGES"),
		Instance: state,
		Logger:   c.Logger,
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(libvirt.DefaultDir, "agent-"+hex.EncodeToString(sum[:6]))
	}
	if cfg.ImageDir == "" {
		cfg.ImageDir = filepath.Join(libvirt.DefaultDir, "images")
	}
	return libvirt.New(cfg)
}
