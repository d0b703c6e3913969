// Package templates reads service templates: what a kind of service
// (postgresql, redis, ...) runs and how, as data. A template is a folder
// holding service.yaml and the scripts it names; the built-in ones are
// embedded in the binary (builtin/), and an operator adds or replaces
// templates with a folder of such folders on the coordinators
// (--service-templates, /etc/corpus/services by default).
//
// service.yaml:
//
//	name: postgresql                 # a DNS label, the folder's name
//	description: PostgreSQL, the relational database
//	versions: ["15"]                 # offered versions, the default first
//	image: debian/bookworm           # the guest's image
//	packages: ["postgresql-{version}"] # Debian packages installed into it
//	port: 5432                       # where it listens (TCP)
//	user: postgres                   # runs start; owns the data
//	volume: {path: /srv/data, min: 256M, default: 1G}
//	memory: {min: 128M, default: 512M}
//	credentials: [PASSWORD]          # secrets generated per service
//	link:                            # what a link gives a project, as AS_KEY
//	  URL: postgres://corpus:{PASSWORD}@{host}:{port}/corpus
//	health: {interval: 5s}
//	backup: {format: pg_dump custom format, extension: .pgdump, write_pause: 0s,
//	         restore: online}        # offline: the server stops meanwhile
//
// Scripts, each run by sh in the service's guest with the credentials,
// DATA (the volume's path), PORT, VERSION and NAME in the environment:
// setup (prepares DATA when it is empty; run before every start, so it
// must leave existing data alone), start (the server in the foreground,
// supervised; run as user), health (exits 0 when the server serves),
// backup (writes a consistent dump to stdout) and restore (reads one from
// stdin). setup, start and health are required.
package templates

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"corpus/internal/names"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

//go:embed builtin
var builtin embed.FS

// DefaultDir is where operators put their templates.
const DefaultDir = "/etc/corpus/services"

// Scripts a template may have; the first three are required.
var (
	required = []string{"setup", "start", "health"}
	optional = []string{"backup", "restore"}
)

// ErrInvalid is wrapped by every error about a template's content.
var ErrInvalid = errors.New("invalid service template")

// Set is the templates a coordinator offers, by name.
type Set map[string]*corpusv1.ServiceTemplate

// Builtin returns the templates embedded in the binary.
func Builtin() (Set, error) {
	sub, err := fs.Sub(builtin, "builtin")
	if err != nil {
		return nil, err
	}
	return readAll(sub, "builtin")
}

// Load returns the built-in templates with those of dir added (a template
// of dir replaces a built-in one of its name). A dir that does not exist
// adds nothing; a template in it that does not parse fails the load.
func Load(dir string) (Set, error) {
	set, err := Builtin()
	if err != nil {
		return nil, fmt.Errorf("built-in service templates: %w", err)
	}
	if dir == "" {
		return set, nil
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return set, nil
	}
	extra, err := readAll(os.DirFS(dir), dir)
	if err != nil {
		return nil, err
	}
	for name, t := range extra {
		set[name] = t
	}
	return set, nil
}

// Sorted returns the set's templates by name.
func (s Set) Sorted() []*corpusv1.ServiceTemplate {
	out := make([]*corpusv1.ServiceTemplate, 0, len(s))
	for _, t := range s {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func readAll(fsys fs.FS, source string) (Set, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading service templates in %s: %w", source, err)
	}
	set := Set{}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		t, err := Read(fsys, e.Name(), source)
		if err != nil {
			return nil, err
		}
		set[t.Name] = t
	}
	return set, nil
}

// definition is service.yaml.
type definition struct {
	Name        string            `yaml:"name"`
	Description string            `yaml:"description"`
	Versions    []string          `yaml:"versions"`
	Image       string            `yaml:"image"`
	Packages    []string          `yaml:"packages"`
	Port        int32             `yaml:"port"`
	User        string            `yaml:"user"`
	Volume      sizes             `yaml:"volume"`
	Memory      sizes             `yaml:"memory"`
	Credentials []string          `yaml:"credentials"`
	Link        map[string]string `yaml:"link"`
	Health      struct {
		Interval string `yaml:"interval"`
	} `yaml:"health"`
	Backup struct {
		Format     string `yaml:"format"`
		Extension  string `yaml:"extension"`
		WritePause string `yaml:"write_pause"`
		Restore    string `yaml:"restore"`
	} `yaml:"backup"`
}

type sizes struct {
	Path    string `yaml:"path"`
	Min     string `yaml:"min"`
	Default string `yaml:"default"`
}

var (
	envName     = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	placeholder = regexp.MustCompile(`\{[^{}]*\}`)
	versionRe   = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+~-]*$`)
)

// Read reads the template in folder dir of fsys; source says where it
// came from ("builtin" or the operator's folder).
func Read(fsys fs.FS, dir, source string) (*corpusv1.ServiceTemplate, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s/%s: %s", ErrInvalid, source, dir, fmt.Sprintf(format, args...))
	}
	raw, err := fs.ReadFile(fsys, path.Join(dir, "service.yaml"))
	if err != nil {
		return nil, bad("%v", err)
	}
	var d definition
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return nil, bad("service.yaml: %v", err)
	}
	if d.Name != dir {
		return nil, bad("name %q differs from its folder's", d.Name)
	}
	if err := names.Validate("template", d.Name); err != nil {
		return nil, bad("%v", err)
	}
	if len(d.Versions) == 0 {
		return nil, bad("no versions")
	}
	for _, v := range d.Versions {
		if !versionRe.MatchString(v) {
			return nil, bad("version %q: use letters, digits and . + ~ -", v)
		}
	}
	if d.Image == "" {
		return nil, bad("no image")
	}
	if d.Port < 1 || d.Port > 65535 {
		return nil, bad("port %d is not a TCP port", d.Port)
	}
	if d.Volume.Path == "" || !path.IsAbs(d.Volume.Path) {
		return nil, bad("volume.path %q is not an absolute path", d.Volume.Path)
	}
	t := &corpusv1.ServiceTemplate{
		Name: d.Name, Description: d.Description, Versions: d.Versions, Image: d.Image,
		Packages: d.Packages, Port: d.Port, User: d.User, VolumePath: path.Clean(d.Volume.Path),
		Credentials: d.Credentials, LinkEnv: d.Link, HealthInterval: d.Health.Interval,
		BackupFormat: d.Backup.Format, BackupExtension: d.Backup.Extension, BackupWritePause: d.Backup.WritePause,
		Source: source, Files: map[string][]byte{},
	}
	for _, f := range []struct {
		field *int64
		value string
		what  string
		def   int64
	}{
		{&t.MinVolumeBytes, d.Volume.Min, "volume.min", 64 << 20},
		{&t.DefaultVolumeBytes, d.Volume.Default, "volume.default", 1 << 30},
		{&t.MinMemoryBytes, d.Memory.Min, "memory.min", 64 << 20},
		{&t.DefaultMemoryBytes, d.Memory.Default, "memory.default", 256 << 20},
	} {
		*f.field = f.def
		if f.value != "" {
			v, err := units.ParseSize(f.value)
			if err != nil {
				return nil, bad("%s: %v", f.what, err)
			}
			*f.field = v
		}
	}
	if t.DefaultVolumeBytes < t.MinVolumeBytes || t.DefaultMemoryBytes < t.MinMemoryBytes {
		return nil, bad("a default size is below its minimum")
	}
	for _, s := range []struct{ what, value string }{{"health.interval", t.HealthInterval}, {"backup.write_pause", t.BackupWritePause}} {
		if s.value == "" {
			continue
		}
		if d, err := time.ParseDuration(s.value); err != nil || d < 0 {
			return nil, bad("%s %q is not a duration (5s, 1m)", s.what, s.value)
		}
	}
	switch d.Backup.Restore {
	case "", "online":
	case "offline":
		t.RestoreOffline = true
	default:
		return nil, bad("backup.restore %q: use online or offline", d.Backup.Restore)
	}
	if t.HealthInterval == "" {
		t.HealthInterval = "5s"
	}
	for _, c := range d.Credentials {
		if !envName.MatchString(c) {
			return nil, bad("credential %q: use capitals, digits and _", c)
		}
	}
	known := map[string]bool{"host": true, "port": true, "name": true, "version": true}
	for _, c := range d.Credentials {
		known[c] = true
	}
	for k, v := range d.Link {
		if !envName.MatchString(k) {
			return nil, bad("link variable %q: use capitals, digits and _", k)
		}
		for _, p := range placeholder.FindAllString(v, -1) {
			if !known[strings.Trim(p, "{}")] {
				return nil, bad("link variable %s: unknown placeholder %s", k, p)
			}
		}
	}
	for _, p := range d.Packages {
		for _, ph := range placeholder.FindAllString(p, -1) {
			if ph != "{version}" {
				return nil, bad("package %q: only {version} may be replaced", p)
			}
		}
	}
	for _, name := range append(slices.Clone(required), optional...) {
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && slices.Contains(optional, name):
			continue
		case err != nil:
			return nil, bad("script %s: %v", name, err)
		}
		t.Files[name] = b
	}
	t.Digest = digest(raw, t.Files)
	return t, nil
}

// digest hashes a template's definition and scripts.
func digest(def []byte, files map[string][]byte) string {
	h := sha256.New()
	h.Write(def)
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "\x00%s\x00%d\x00", k, len(files[k]))
		h.Write(files[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Packages returns the template's packages for a version.
func Packages(t *corpusv1.ServiceTemplate, version string) []string {
	out := make([]string, 0, len(t.Packages))
	for _, p := range t.Packages {
		out = append(out, strings.ReplaceAll(p, "{version}", version))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// LinkEnv returns the variables a link named as gives a project (AS_KEY),
// their placeholders filled from vars (host, port, name, version and the
// credentials).
func LinkEnv(t *corpusv1.ServiceTemplate, as string, vars map[string]string) map[string]string {
	out := make(map[string]string, len(t.LinkEnv))
	for k, v := range t.LinkEnv {
		out[as+"_"+k] = placeholder.ReplaceAllStringFunc(v, func(p string) string { return vars[strings.Trim(p, "{}")] })
	}
	return out
}

// ValidAs checks a link's variable prefix.
func ValidAs(as string) error {
	if !envName.MatchString(as) {
		return fmt.Errorf("link name %q: use capitals, digits and _, starting with a capital (DATABASE)", as)
	}
	return nil
}

// DefaultAs is the prefix of a link's variables when none is given: the
// template's name in capitals.
func DefaultAs(template string) string {
	return strings.ToUpper(strings.ReplaceAll(template, "-", "_"))
}
