package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"

	"corpus/internal/atomicfile"
)

// Config is the CLI's config file: named environments, each with the
// address of a coordinator and the credential to use there.
type Config struct {
	Current      string                  `yaml:"current,omitempty"`
	Environments map[string]*Environment `yaml:"environments,omitempty"`
}

// Environment is one cluster the CLI can talk to.
type Environment struct {
	Address string `yaml:"address"`
	Token   string `yaml:"token,omitempty"`
	// CACert is the cluster CA (PEM) the CLI trusts for this environment.
	CACert string `yaml:"ca_cert,omitempty"`
}

// DefaultConfigPath is ~/.config/corpus/config.yaml (XDG_CONFIG_HOME
// honoured).
func DefaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = filepath.Join(os.Getenv("HOME"), ".config")
	}
	return filepath.Join(dir, "corpus", "config.yaml")
}

// LoadConfig reads the config file at path; a missing file is an empty
// config. Unknown fields are refused so a typo does not silently do
// nothing.
func LoadConfig(path string) (*Config, error) {
	cfg := &Config{Environments: map[string]*Environment{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := decodeStrict(raw, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Environments == nil {
		cfg.Environments = map[string]*Environment{}
	}
	for name, e := range cfg.Environments {
		if e == nil || e.Address == "" {
			return nil, fmt.Errorf("%s: environment %q has no address", path, name)
		}
	}
	return cfg, nil
}

// decodeStrict decodes YAML refusing unknown fields.
func decodeStrict(raw []byte, out any) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Save writes the config file, readable by its owner alone (it holds
// tokens).
func (c *Config) Save(path string) error {
	raw, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, raw, 0o600)
}

// Names returns the environments' names, sorted.
func (c *Config) Names() []string {
	out := make([]string, 0, len(c.Environments))
	for n := range c.Environments {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// SaveEnvironment adds or replaces one environment of the config file at
// path; it becomes current when asked or when there is no current one.
func SaveEnvironment(path, name string, e *Environment, use bool) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	cfg.Environments[name] = e
	if use || cfg.Current == "" {
		cfg.Current = name
	}
	return cfg.Save(path)
}

// SaveCA makes caPEM the CAs the environment t chose trusts, in the
// config file (a CA rotation's new one). It saves nothing when t names
// its CA by a file (--ca-cert), or when the environment is not in the
// file, and says which environment it saved.
func (t Target) SaveCA(caPEM string) (string, error) {
	if t.CAFile != "" {
		return "", nil
	}
	cfg, err := LoadConfig(t.ConfigFile)
	if err != nil {
		return "", err
	}
	name := t.Env
	if name == "" {
		name = cfg.Current
	}
	e, ok := cfg.Environments[name]
	if !ok || e.CACert == caPEM {
		return "", nil
	}
	e.CACert = caPEM
	return name, cfg.Save(t.ConfigFile)
}
