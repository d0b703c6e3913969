//go:build linux && cgo

package lxc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	golxc "github.com/lxc/go-lxc"
	"golang.org/x/sys/unix"

	"corpus/drivers"
	"corpus/images/cache"
	"corpus/images/oci"
	"corpus/volume/loop"
)

var _ drivers.Driver = (*Driver)(nil)

// Driver runs guests as LXC containers in one lxcpath. It is safe for
// concurrent use; callers serialise operations on one guest, as the
// drivers.Driver contract says.
type Driver struct {
	path     string // lxcpath of guests
	imgPath  string // lxcpath of image caches, <path>/.images
	log      *slog.Logger
	cgroup   int       // 1 or 2, see cgroupVersion
	apparmor bool      // kernel enforces AppArmor
	clone    cloneMode // how guests are made from image caches
	// ids are where unprivileged guests' ids live on this host; nil
	// when they could not be had (idsErr says why).
	ids    *hostIDs
	idsErr error
	// idmapped is set where overlay guests stack on an idmapped mount
	// of their image (see idmount_linux.go).
	idmapped bool
	// disks keeps guests' root file system disks; nil where loop
	// devices cannot be had (no limits then).
	disks *loop.Backend
	// oci is the store OCI images are pulled into (oci_linux.go).
	oci *oci.Store

	// builds guards image cache builds so each runs once at a time.
	buildsMu sync.Mutex
	builds   map[string]*imageBuild
	// built counts image builds that ran; tests read it.
	built atomic.Int64
	// store is Config.Store; stored counts images taken from it.
	store  string
	stored atomic.Int64

	// cacheMu keeps images from being removed while guests are made
	// from them; cacheMax is the cache's cap in bytes (0: none) and
	// usage its last measure (see cache_linux.go).
	cacheMu  sync.RWMutex
	cacheMax int64
	usage    atomic.Pointer[drivers.ImageCacheUsage]

	// rdepsMu serialises clones from and destroys of overlay guests: both
	// rewrite the cache container's lxc_snapshots list.
	rdepsMu sync.Mutex
}

// New returns a driver owning cfg.Path, creating the directory if needed.
// It fails when the path is not absolute or cannot be created, or when the
// host's cgroup layout cannot be read. A host where containers cannot run
// (not root, say) still gets a driver; Fingerprint reports it unhealthy.
func New(cfg Config) (*Driver, error) {
	if cfg.Path == "" || !filepath.IsAbs(cfg.Path) {
		return nil, fmt.Errorf("creating lxc driver: path %q is not absolute", cfg.Path)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	path := filepath.Clean(cfg.Path)
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("creating lxc driver: %w", err)
	}
	cg, err := cgroupVersion()
	if err != nil {
		return nil, fmt.Errorf("creating lxc driver: %w", err)
	}
	d := &Driver{
		path:     path,
		imgPath:  filepath.Join(path, imagesDir),
		log:      logger.With("component", "lxc"),
		cgroup:   cg,
		apparmor: apparmorEnabled(),
		clone:    cloneCopy,
		builds:   make(map[string]*imageBuild),
	}
	if cfg.Store != "" {
		if !filepath.IsAbs(cfg.Store) {
			return nil, fmt.Errorf("creating lxc driver: image store %q is not absolute", cfg.Store)
		}
		d.store = filepath.Clean(cfg.Store)
	}
	limit := cfg.ImageCacheMax
	if limit == "" {
		limit = DefaultImageCacheMax
	}
	if d.cacheMax, err = cache.ParseMax(limit, path); err != nil {
		return nil, fmt.Errorf("creating lxc driver: %w", err)
	}
	d.oci = cfg.OCI
	if d.oci == nil {
		d.oci = &oci.Store{Root: filepath.Join(path, OCIStoreDir), Insecure: cfg.InsecureRegistries,
			CertsDir: cfg.RegistryCertsDir, Log: d.log, Keychain: cfg.Keychain}
	}
	if err := d.oci.Sweep(); err != nil {
		d.log.Warn("cleaning up after interrupted image pulls", "error", err)
	}
	for _, dir := range []string{d.path, d.imgPath} {
		if err := sweepCopies(dir); err != nil {
			d.log.Warn("cleaning up after interrupted copies", "error", err)
		}
	}
	if overlaySupported(path) {
		d.clone = cloneOverlay
	}
	if os.Geteuid() == 0 {
		subuid, subgid := cfg.SubUIDFile, cfg.SubGIDFile
		if subuid == "" {
			subuid = "/etc/subuid"
		}
		if subgid == "" {
			subgid = "/etc/subgid"
		}
		if h, err := readHostIDs(subuid, subgid); err != nil {
			d.idsErr = err
		} else if err := searchable(path); err != nil {
			d.idsErr = err
		} else {
			d.ids = &h
			if h.ranges == 0 {
				d.log.Warn("guests share one id range: root's subordinate ids hold no more; give root more in /etc/subuid and /etc/subgid (65,536 a guest)",
					"subuid", subuid, "subgid", subgid)
			}
		}
		if d.ids != nil && d.clone == cloneOverlay {
			m, _ := d.ids.idmap(0)
			if err := probeIDMapped(path, m); err != nil {
				d.log.Info("guests' images are copied per id range (no idmapped mounts for overlays here)", "error", err)
			} else {
				d.idmapped = true
			}
		}
		d.sweepImageMounts()
		if err := d.writeSeccomp(); err != nil {
			return nil, fmt.Errorf("creating lxc driver: %w", err)
		}
		d.disks = newDisks(path, d.log)
	}
	if _, err := d.scanImages(context.Background()); err != nil {
		d.log.Warn("measuring the image cache", "error", err)
	}
	return d, nil
}

// Name returns "lxc".
func (d *Driver) Name() string { return Name }

// Capabilities reports exec support and the images the driver can build.
func (d *Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Exec:          true,
		ExecStreams:   true,
		ExecTerminal:  true,
		Images:        imageNames(),
		OCIImages:     true,
		PackageImages: packageImages(),
		HostNetwork:   true,
		Volumes:       drivers.HostVolumes,
		IDRanges:      d.idRanges(),
	}
}

// idRanges is how many id ranges of their own the host has for guests.
func (d *Driver) idRanges() uint32 {
	if d.ids == nil {
		return 0
	}
	return d.ids.ranges
}

// Fingerprint reports the driver healthy when liblxc loads, the process
// runs as root (liblxc needs it to make any container), the host has an
// id map for unprivileged guests, and the lxcpath is a writable directory.
func (d *Driver) Fingerprint(ctx context.Context) drivers.Fingerprint {
	fp := drivers.Fingerprint{
		Attributes: map[string]string{
			"lxc.version":    golxc.Version(),
			"lxc.path":       d.path,
			"lxc.clone":      d.clone.String(),
			"cgroup.version": strconv.Itoa(d.cgroup),
			"apparmor":       strconv.FormatBool(d.apparmor),
		},
	}
	if d.ids != nil {
		fp.Attributes["lxc.idmap"] = fmt.Sprintf("u:%d g:%d n:%d", d.ids.uid.start, d.ids.gid.start, guestIDs)
		fp.Attributes["lxc.id_ranges"] = strconv.FormatUint(uint64(d.ids.ranges), 10)
		fp.Attributes["lxc.image_shift"] = "copy per range"
		if d.idmapped {
			fp.Attributes["lxc.image_shift"] = "idmapped mount"
		}
	}
	if err := d.probe(); err != nil {
		fp.Detail = err.Error()
		return fp
	}
	fp.Healthy = true
	return fp
}

// probe checks that containers can be managed in d.path.
func (d *Driver) probe() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not running as root (liblxc needs it to make containers)")
	}
	if d.ids == nil {
		return fmt.Errorf("no id map for unprivileged guests: %v", d.idsErr)
	}
	fi, err := os.Stat(d.path)
	if err != nil {
		return fmt.Errorf("checking lxcpath: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("checking lxcpath: %s is not a directory", d.path)
	}
	if err := unix.Access(d.path, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("checking lxcpath %s: %w", d.path, err)
	}
	c, err := golxc.NewContainer("probe", d.path)
	if err != nil {
		return fmt.Errorf("checking liblxc: %w", err)
	}
	c.Release()
	return nil
}
