package api

import (
	"fmt"
	"maps"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"corpus/coordinator/state"
	"corpus/internal/imageref"
	"corpus/internal/names"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// Guest defaults, applied when a request leaves a field unset.
const (
	DefaultDriver      = "lxc"
	DefaultMemoryBytes = 256 << 20
	DefaultCPUMillis   = 250
	DefaultDiskBytes   = 1 << 30

	minMemoryBytes = 16 << 20
	minCPUMillis   = 10
	// minDiskBytes is the smallest root file system disk a guest gets
	// (the smallest loop volume).
	minDiskBytes = 32 << 20
	maxEnvVars   = 128
	// maxPackages bounds the Debian packages a guest's image adds.
	maxPackages = 64
	// maxArgs and maxArgBytes bound a guest's command and args.
	maxArgs     = 256
	maxArgBytes = 64 << 10
	// MaxEnvNameBytes bounds an environment variable's name.
	MaxEnvNameBytes = 255
)

func NotFound(kind, name, hint string) error {
	return fmt.Errorf("%s %q: %w (list them with `%s`)", kind, name, state.ErrNotFound, hint)
}

// NormalizeSpec fills defaults and validates a guest spec in place.
func NormalizeSpec(spec *corpusv1.GuestSpec) error {
	if spec.Driver == "" {
		spec.Driver = DefaultDriver
	}
	if err := names.Validate("driver", spec.Driver); err != nil {
		return err
	}
	if spec.Image == "" {
		return Invalidf("an image is required (for example --image busybox)")
	}
	if err := validImage(spec.Image); err != nil {
		return err
	}
	if spec.Resources == nil {
		spec.Resources = &corpusv1.Resources{}
	}
	r := spec.Resources
	if r.MemoryBytes == 0 {
		r.MemoryBytes = DefaultMemoryBytes
	}
	if r.CpuMillis == 0 {
		r.CpuMillis = DefaultCPUMillis
	}
	if r.DiskBytes == 0 {
		r.DiskBytes = DefaultDiskBytes
	}
	switch {
	case r.MemoryBytes < minMemoryBytes:
		return Invalidf("memory %d bytes is below the minimum of %d MiB", r.MemoryBytes, minMemoryBytes>>20)
	case r.CpuMillis < minCPUMillis:
		return Invalidf("cpu %d millicores is below the minimum of %dm (a hundredth of a core)", r.CpuMillis, minCPUMillis)
	case r.DiskBytes < minDiskBytes:
		return Invalidf("disk %d bytes is below the minimum of %d MiB", r.DiskBytes, minDiskBytes>>20)
	}
	if err := normalizePorts(spec.Ports); err != nil {
		return err
	}
	if err := normalizeVolume(spec); err != nil {
		return err
	}
	if err := normalizeConstraints(spec); err != nil {
		return err
	}
	if err := normalizePackages(spec); err != nil {
		return err
	}
	if err := validCommand(spec); err != nil {
		return err
	}
	if len(spec.Env) > maxEnvVars {
		return Invalidf("%d environment variables; the limit is %d", len(spec.Env), maxEnvVars)
	}
	for k, v := range spec.Env {
		if !names.EnvVar(k) || len(k) > MaxEnvNameBytes {
			return Invalidf("environment variable name %.80q must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes", k, MaxEnvNameBytes)
		}
		if strings.ContainsAny(v, "\x00\n") {
			return Invalidf("environment variable %s has a NUL or newline in its value", k)
		}
	}
	return nil
}

// normalizePackages checks a spec's Debian package names and sorts them,
// without duplicates: the set, not its order, names the image.
func normalizePackages(spec *corpusv1.GuestSpec) error {
	if len(spec.Packages) == 0 {
		return nil
	}
	if len(spec.Packages) > maxPackages {
		return Invalidf("%d packages; the limit is %d", len(spec.Packages), maxPackages)
	}
	for _, p := range spec.Packages {
		if !names.DebianPackage(p) {
			return Invalidf("package %.110q is not a Debian package name (lowercase letters, digits, '+', '-', '.'; like python3 or postgresql-15)", p)
		}
	}
	slices.Sort(spec.Packages)
	spec.Packages = slices.Compact(spec.Packages)
	return nil
}

// validCommand checks the command and args that replace an OCI image's
// entrypoint and cmd: an argv, so no NUL byte; a command's first word
// names the program.
func validCommand(spec *corpusv1.GuestSpec) error {
	words := append(slices.Clone(spec.Command), spec.Args...)
	if len(words) > maxArgs {
		return Invalidf("a command and args of %d words; the limit is %d", len(words), maxArgs)
	}
	size := 0
	for _, w := range words {
		size += len(w)
		if strings.ContainsRune(w, 0) {
			return Invalidf("the command or an arg has a NUL byte")
		}
	}
	if size > maxArgBytes {
		return Invalidf("a command and args of %d bytes; the limit is %d", size, maxArgBytes)
	}
	if len(spec.Command) > 0 && spec.Command[0] == "" {
		return Invalidf("the command's first word, the program, is empty")
	}
	if len(words) > 0 && len(spec.Packages) > 0 {
		return Invalidf("packages are for the images a node builds, a command for OCI images: not both")
	}
	return nil
}

// GuestStatus is the one-word summary of a guest, as view has it.
func GuestStatus(view *state.Snap, g *corpusv1.Guest) string {
	switch {
	case g.DesiredState == state.DesiredDeleted:
		return "deleting"
	case g.NodeId == "":
		return "pending"
	case view.Node(g.NodeId).GetStatus() == state.NodeDown:
		return corpusv1.GuestLost
	case g.Observed == nil:
		return "placed"
	}
	return g.Observed.State
}

// normalizeConstraints validates a guest's label constraints.
func normalizeConstraints(spec *corpusv1.GuestSpec) error {
	if len(spec.Constraints) == 0 {
		spec.Constraints = nil
		return nil
	}
	for k, v := range spec.Constraints {
		if k == "mode" {
			return Invalidf("mode is not a label: a node's mode takes the guests of project environments (corpus project create --env %s)", v)
		}
		if v == "" {
			return Invalidf("constraint %s has no value: want LABEL=VALUE", k)
		}
		if err := ValidLabel(k, v); err != nil {
			return err
		}
	}
	return nil
}

// normalizeVolume validates a guest's volume request in place; a new
// volume's size becomes one the node makes exactly (volume.NormalizeSize).
func normalizeVolume(spec *corpusv1.GuestSpec) error {
	v := spec.Volume
	if v == nil {
		return nil
	}
	if v.SizeBytes == 0 && v.UseVolume == "" {
		spec.Volume = nil
		return nil
	}
	if v.UseVolume != "" {
		if v.SizeBytes != 0 {
			return Invalidf("give a size for a new volume or --use-volume for an existing one, not both")
		}
		if err := names.Validate("volume", v.UseVolume); err != nil {
			return err
		}
	} else {
		size, err := volume.NormalizeSize(v.SizeBytes)
		if err != nil {
			return Invalidf("%v", err)
		}
		v.SizeBytes = size
	}
	if v.Path == "" {
		v.Path = state.DefaultVolumePath
	}
	if !path.IsAbs(v.Path) || path.Clean(v.Path) != v.Path || v.Path == "/" || len(v.Path) > maxPathBytes || !pathRE.MatchString(v.Path) {
		return Invalidf("volume path %.80q must be a clean absolute path inside the guest, not /, of letters, digits and . _ - / (at most %d bytes)", v.Path, maxPathBytes)
	}
	return nil
}

// maxPathBytes bounds a path inside a guest.
const maxPathBytes = 255

// pathRE is what corpus accepts in a path inside a guest: no shell or
// LXC-config metacharacters, no spaces.
var pathRE = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// imageComponentRE is one '/'-separated part of an image name: a
// registry host:port, a repository, a name:tag or name@digest.
var imageComponentRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._:@+-]*[A-Za-z0-9])?$`)

// validImage checks an image name ("busybox", "debian/bookworm",
// "registry.example.org:5000/team/app:1.2", "app@sha256:..."): ASCII
// parts that start and end with a letter or digit, no "..", at most 255
// bytes.
func validImage(image string) error {
	if len(image) > 255 {
		return Invalidf("image name of %d bytes; the limit is 255", len(image))
	}
	for _, part := range strings.Split(image, "/") {
		if !imageComponentRE.MatchString(part) || strings.Contains(part, "..") {
			return Invalidf("image %q is not a valid image name (like busybox, debian/bookworm or registry:5000/app:1.2)", image)
		}
	}
	if imageref.IsReference(image) {
		if _, err := imageref.Parse(image, false); err != nil {
			return Invalidf("%v", err)
		}
	}
	return nil
}

// ValidImageRef checks the OCI reference a release is made from
// (corpus deploy --image): an image name validImage accepts that is a
// reference to a registry, not the name of an image a driver builds.
func ValidImageRef(image string) error {
	if image == "" {
		return Invalidf("no image: want REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST")
	}
	if err := validImage(image); err != nil {
		return err
	}
	if !imageref.IsReference(image) {
		_, err := imageref.Parse(image, false)
		return Invalidf("%v; a release is made from an image in a registry", err)
	}
	return nil
}

// labelValueRE is a label value: up to 63 letters, digits, '-', '_' and
// '.', starting and ending with a letter or digit (Kubernetes' rule).
var labelValueRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// idRE is a generated object id (tokens, records, releases): hex.
var idRE = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

// ValidID checks the id of an object of kind; hint is the command that
// lists them.
func ValidID(kind, id, hint string) error {
	if !idRE.MatchString(id) {
		return Invalidf("%s id %.80q: ids are lowercase hex (list them with `%s`)", kind, id, hint)
	}
	return nil
}

// NodeRef checks what names a node: its name or its id.
func NodeRef(ref string) error {
	if names.Validate("node", ref) == nil || idRE.MatchString(ref) {
		return nil
	}
	return Invalidf("node %.80q: give a node's name or id (list them with `corpus node list`)", ref)
}

// FingerprintRE is an SSH key's SHA256 fingerprint.
var FingerprintRE = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}$`)

// dnsLabelRE is one label of a record name or target: letters, digits,
// '-' and '_' (SRV and ACME names), not starting or ending with '-'.
var dnsLabelRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$`)

// ValidDNSName checks a record's name, relative to the zone or absolute
// (a final dot), or a target name ("@" is the zone's apex).
func ValidDNSName(what, name string) error {
	if name == "@" {
		return nil
	}
	n := strings.TrimSuffix(name, ".")
	if n == "" || len(n) > 253 {
		return Invalidf("%s %.80q is not a DNS name", what, name)
	}
	for _, l := range strings.Split(n, ".") {
		if !dnsLabelRE.MatchString(l) {
			return Invalidf("%s %.80q has an invalid label %.80q: use letters, digits, '-' and '_'", what, name, l)
		}
	}
	return nil
}

// ValidText checks a one-line free-text field: no control characters,
// at most limit bytes.
func ValidText(what, v string, limit int) error {
	if len(v) > limit {
		return Invalidf("%s of %d bytes; the limit is %d", what, len(v), limit)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return Invalidf("%s %.80q has a control character (a newline, NUL or escape)", what, v)
	}
	return nil
}

// ValidHostPort checks a host:port a coordinator dials: the host an IP
// address or a DNS name, the port 1-65535.
func ValidHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	if net.ParseIP(host) == nil {
		if err := ValidDNSName("host", host); err != nil || strings.Contains(host, "_") {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
		}
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q", port)
	}
	return nil
}

func ValidPort(what string, p int32) error {
	if p < 1 || p > 65535 {
		return Invalidf("%s %d is not a port (1-65535)", what, p)
	}
	return nil
}

// normalizePorts validates NAT port mappings in place.
func normalizePorts(ports []*corpusv1.Port) error {
	seen := map[string]bool{}
	for _, p := range ports {
		if p.Protocol == "" {
			p.Protocol = "tcp"
		}
		if p.Protocol != "tcp" && p.Protocol != "udp" {
			return Invalidf("port protocol %q: use tcp or udp", p.Protocol)
		}
		if err := ValidPort("host port", p.HostPort); err != nil {
			return err
		}
		if err := ValidPort("guest port", p.GuestPort); err != nil {
			return err
		}
		key := fmt.Sprintf("%d/%s", p.HostPort, p.Protocol)
		if seen[key] {
			return Invalidf("host port %s is published twice", key)
		}
		seen[key] = true
	}
	return nil
}

// CheckConfigChange validates a change before anything is sealed or
// written: the errors name keys, never values.
func CheckConfigChange(set map[string]string, unset []string) error {
	if len(set) == 0 && len(unset) == 0 {
		return Invalidf("nothing to set or unset: give KEY=VALUE or KEY")
	}
	if len(set)+len(unset) > state.MaxConfigKeys {
		return Invalidf("%d keys in one change; the limit is %d", len(set)+len(unset), state.MaxConfigKeys)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if err := state.ValidConfigKey(k); err != nil {
			return Invalidf("%v", err)
		}
		v := set[k]
		switch {
		case strings.ContainsRune(v, 0):
			return Invalidf("the value of %s holds a NUL byte, which no environment variable can carry", k)
		case len(v) > state.MaxConfigValueBytes:
			return Invalidf("the value of %s is %s; the limit is %s", k, units.FormatSize(int64(len(v))), units.FormatSize(state.MaxConfigValueBytes))
		}
	}
	for _, k := range unset {
		if err := state.ValidConfigKey(k); err != nil {
			return Invalidf("%v", err)
		}
		if _, ok := set[k]; ok {
			return Invalidf("%s is both set and unset", k)
		}
	}
	return nil
}

// ValidEnv checks an environment's name: dev, staging or prod.
func ValidEnv(env string) error {
	switch env {
	case corpusv1.EnvDev, corpusv1.EnvStaging, corpusv1.EnvProd:
		return nil
	}
	return Invalidf("environment %q: use dev, staging or prod", env)
}

// ValidProcessName checks a process type: process types are short
// lowercase names (Procfile).
func ValidProcessName(name string) error {
	if !names.Process(name) {
		return Invalidf("process name %.40q: want [a-z][a-z0-9_-]*, up to 32 characters", name)
	}
	return nil
}

// ValidLabel checks a node label: a name and a short value.
func ValidLabel(k, v string) error {
	if err := names.Validate("label", k); err != nil {
		return err
	}
	if !labelValueRE.MatchString(v) {
		return Invalidf("label %s=%.80q: values are up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit", k, v)
	}
	return nil
}
