// Package manifest reads the project contract a pushed tree carries:
// .corpus/corpus.yaml (the manifest) and the Procfile, strictly, with
// their defaults and bounds.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"corpus/internal/names"
)

// The project contract: what a pushed tree may carry in .corpus/.
const (
	Dir        = ".corpus"
	File       = ".corpus/corpus.yaml"
	InstallDir = ".corpus/install.d"
)

// HookNames are the overridable procedures besides install.d.
var HookNames = []string{"archive", "fixperms", "notify", "rollback"}

// Manifest is .corpus/corpus.yaml. Every field is optional.
type Manifest struct {
	// Keep is how many releases stay in the guest (default 5).
	Keep int `yaml:"keep"`
	// Timeout bounds each step (default 10m).
	Timeout time.Duration `yaml:"timeout"`
	// User runs install.d and the hooks (default root).
	User string `yaml:"user"`
	// Env is added to every step's environment.
	Env map[string]string `yaml:"env"`
	// Health is checked after install, before the switch.
	Health *Health `yaml:"health"`
	// Domains are routed to the environment through the proxy, besides
	// those the project was created with, from the switch on.
	Domains []string `yaml:"domains"`
	// Processes are the project's long-running commands, by type (as
	// Procfile lines; a Procfile at the root may hold them instead): the
	// supervisor in the guest runs them. web gets PORT and the domains'
	// traffic.
	Processes map[string]string `yaml:"processes"`
	// Grace is how long a stopping process gets between SIGTERM and
	// SIGKILL (default 10s).
	Grace time.Duration `yaml:"grace"`
	// Deploy says how a release reaches the environment's instances.
	Deploy *DeployPolicy `yaml:"deploy"`
}

// DeployPolicy is how a release goes live: strategy "rolling" (the
// default: instance after instance) or "blue-green" (every instance
// starts it beside, then every domain moves at once; the release before
// stands by for keep, 1h by default). corpus deploy --strategy overrides
// it.
type DeployPolicy struct {
	Strategy string        `yaml:"strategy"`
	Keep     time.Duration `yaml:"keep"`
}

// Health is a release's health check.
type Health struct {
	HTTP *HTTPCheck `yaml:"http"`
}

// HTTPCheck asks the guest for path on port until it answers 2xx or 3xx.
type HTTPCheck struct {
	Port    int           `yaml:"port"`
	Path    string        `yaml:"path"`
	Timeout time.Duration `yaml:"timeout"`
}

// Manifest defaults and bounds.
const (
	// StrategyBlueGreen is the deploy strategy that stages a release
	// on every instance, then moves every domain at once.
	StrategyBlueGreen = "blue-green"

	defaultKeep          = 5
	maxKeep              = 100
	DefaultStepTimeout   = 10 * time.Minute
	DefaultHealthTimeout = 30 * time.Second
	maxManifestBytes     = 64 << 10
	defaultGrace         = 10 * time.Second
	maxStandby           = 7 * 24 * time.Hour
	maxGrace             = 5 * time.Minute
	maxProcesses         = 20
	Procfile             = "Procfile"
)

// Strategy is the deploy strategy and standby time (seconds) of a
// release: those asked for, else the manifest's.
func (m *Manifest) Strategy(asked string, keep int64) (string, int64) {
	if asked != "" || m.Deploy == nil {
		return asked, keep
	}
	return m.Deploy.Strategy, int64(m.Deploy.Keep / time.Second)
}

// Parse reads corpus.yaml strictly (unknown keys are errors, so a
// typo does not silently do nothing) and fills defaults.
func Parse(data []byte) (*Manifest, error) {
	m := &Manifest{}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%s is %d bytes; the limit is %d", File, len(data), maxManifestBytes)
	}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(m); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", File, err)
		}
	}
	if m.Keep == 0 {
		m.Keep = defaultKeep
	}
	if m.Keep < 1 || m.Keep > maxKeep {
		return nil, fmt.Errorf("%s: keep %d: want 1 to %d", File, m.Keep, maxKeep)
	}
	if m.Timeout == 0 {
		m.Timeout = DefaultStepTimeout
	}
	if m.Timeout < time.Second {
		return nil, fmt.Errorf("%s: timeout %s is under a second", File, m.Timeout)
	}
	if m.User != "" && !validUserName(m.User) {
		return nil, fmt.Errorf("%s: user %q is not a valid user name", File, m.User)
	}
	for k, v := range m.Env {
		if !names.EnvVar(k) || strings.HasPrefix(k, "CORPUS_") {
			return nil, fmt.Errorf("%s: env %q: names are [A-Za-z_][A-Za-z0-9_]* and CORPUS_ is reserved", File, k)
		}
		if strings.ContainsAny(v, "\x00\n") {
			return nil, fmt.Errorf("%s: env %s has a NUL or newline", File, k)
		}
	}
	for i, given := range m.Domains {
		d, err := names.ParseDomain(given)
		if err != nil {
			return nil, fmt.Errorf("%s: domains: %w", File, err)
		}
		m.Domains[i] = string(d)
	}
	if err := checkProcesses(File, m.Processes); err != nil {
		return nil, err
	}
	if m.Grace == 0 {
		m.Grace = defaultGrace
	}
	if m.Grace < 0 || m.Grace > maxGrace {
		return nil, fmt.Errorf("%s: grace %s: want up to %s", File, m.Grace, maxGrace)
	}
	if d := m.Deploy; d != nil {
		switch d.Strategy {
		case "", "rolling":
			if d.Keep != 0 {
				return nil, fmt.Errorf("%s: deploy keep is for strategy blue-green", File)
			}
		case StrategyBlueGreen:
			if d.Keep < 0 || d.Keep > maxStandby {
				return nil, fmt.Errorf("%s: deploy keep %s: want up to %s", File, d.Keep, maxStandby)
			}
		default:
			return nil, fmt.Errorf("%s: deploy strategy %q: want rolling or blue-green", File, d.Strategy)
		}
	}
	if h := m.Health; h != nil && h.HTTP != nil {
		c := h.HTTP
		if c.Port < 1 || c.Port > 65535 {
			return nil, fmt.Errorf("%s: health http port %d is not a port", File, c.Port)
		}
		if c.Path == "" {
			c.Path = "/"
		}
		if !strings.HasPrefix(c.Path, "/") || strings.ContainsAny(c.Path, " \t\r\n") {
			return nil, fmt.Errorf("%s: health http path %q must start with / and have no spaces", File, c.Path)
		}
		if c.Timeout == 0 {
			c.Timeout = DefaultHealthTimeout
		}
	}
	return m, nil
}

// checkProcesses applies the rules for process types and commands.
func checkProcesses(where string, procs map[string]string) error {
	if len(procs) > maxProcesses {
		return fmt.Errorf("%s: %d processes; the limit is %d", where, len(procs), maxProcesses)
	}
	for _, name := range slices.Sorted(maps.Keys(procs)) {
		if !names.Process(name) {
			return fmt.Errorf("%s: process name %q: want [a-z][a-z0-9_-]*, up to 32 characters", where, name)
		}
		cmd := procs[name]
		switch {
		case strings.TrimSpace(cmd) == "":
			return fmt.Errorf("%s: process %s has no command", where, name)
		case strings.ContainsAny(cmd, "\x00\n"):
			return fmt.Errorf("%s: the command of process %s has a NUL or newline", where, name)
		}
	}
	return nil
}

// ParseProcfile reads a Procfile: "TYPE: command" lines, blank lines and
// # comments. An error names the line.
func ParseProcfile(data []byte) (map[string]string, error) {
	procs := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, cmd, ok := strings.Cut(line, ":")
		name, cmd = strings.TrimSpace(name), strings.TrimSpace(cmd)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s line %d: %q is not \"TYPE: command\"", Procfile, i+1, line)
		case !names.Process(name):
			return nil, fmt.Errorf("%s line %d: process name %q: want [a-z][a-z0-9_-]*, up to 32 characters", Procfile, i+1, name)
		case cmd == "":
			return nil, fmt.Errorf("%s line %d: process %s has no command", Procfile, i+1, name)
		}
		if _, dup := procs[name]; dup {
			return nil, fmt.Errorf("%s line %d: process %s is declared twice", Procfile, i+1, name)
		}
		procs[name] = cmd
	}
	if err := checkProcesses(Procfile, procs); err != nil {
		return nil, err
	}
	return procs, nil
}

// ProcessOrder is the manifest's process types, web first, then by name.
func (m *Manifest) ProcessOrder() []string {
	names := slices.Sorted(maps.Keys(m.Processes))
	if i := slices.Index(names, "web"); i > 0 {
		names = append([]string{"web"}, append(names[:i:i], names[i+1:]...)...)
	}
	return names
}

func validUserName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case (c >= '0' && c <= '9' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
