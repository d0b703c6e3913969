package state

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	"corpus/internal/names"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// Project config: an environment's variables, every value sealed with the
// cluster keyring (internal/seal); the state only ever holds ciphertext,
// so the raft log and its snapshots do too.

// Config bounds, on the values in clear (the API checks them) and, with
// the seal's overhead, on what the state accepts.
const (
	MaxConfigValueBytes = corpusv1.MaxConfigValueBytes
	MaxConfigBytes      = 128 << 10
	MaxConfigKeys       = 200
	// sealOverhead is the most a sealed value adds to its clear length:
	// a header with a key id of up to 255 bytes, a nonce and the tag.
	sealOverhead = 2 + 255 + 12 + 16
)

// ConfigPlace is what a config value is sealed for: a value copied to
// another key, environment or project does not open.
func ConfigPlace(project, env, key string) string {
	return "config/" + project + "/" + env + "/" + key
}

// ValidConfigKey says why key cannot be a config key, or nil: keys are
// environment variable names, and PORT and CORPUS_* belong to corpus.
func ValidConfigKey(key string) error {
	switch {
	case !names.EnvVar(key):
		return fmt.Errorf("config key %q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", key)
	case key == "PORT" || strings.HasPrefix(key, "CORPUS_"):
		return fmt.Errorf("config key %s is reserved: corpus sets PORT and CORPUS_* itself", key)
	}
	return nil
}

func (a *applier) setConfig(c *corpusv1.SetConfig) error {
	p, env, err := a.projectEnv(c.Project, c.Env)
	if err != nil {
		return err
	}
	if len(c.Set) == 0 && len(c.Unset) == 0 {
		return fmt.Errorf("a config change that sets and unsets nothing: %w", ErrInvalid)
	}
	if err := a.checkSealed("config", c.Set); err != nil {
		return err
	}
	for k, v := range c.Set {
		if err := ValidConfigKey(k); err != nil {
			return fmt.Errorf("%v: %w", err, ErrInvalid)
		}
		if slices.Contains(c.Unset, k) {
			return fmt.Errorf("config key %s is both set and unset: %w", k, ErrInvalid)
		}
		if len(v) > MaxConfigValueBytes+sealOverhead {
			return fmt.Errorf("config %s is over %d bytes: %w", k, MaxConfigValueBytes, ErrInvalid)
		}
	}
	cfg := maps.Clone(env.Config)
	if cfg == nil {
		cfg = map[string][]byte{}
	}
	for _, k := range c.Unset {
		delete(cfg, k)
	}
	maps.Copy(cfg, c.Set)
	if len(cfg) > MaxConfigKeys {
		return fmt.Errorf("%s/%s would hold %d config keys; the limit is %d: %w", p.Name, env.Name, len(cfg), MaxConfigKeys, ErrInvalid)
	}
	total := 0
	for k, v := range cfg {
		total += len(k) + len(v) - sealOverhead
	}
	if total > MaxConfigBytes {
		return fmt.Errorf("%s/%s's config would be over %d bytes: %w", p.Name, env.Name, MaxConfigBytes, ErrInvalid)
	}
	env.Config = cfg
	a.putEnv(p, env)
	return nil
}

// setKeyring installs or rotates the keyring with every sealed value
// resealed, or changes nothing.
func (a *applier) setKeyring(c *corpusv1.SetKeyring) error {
	kr := c.Keyring
	if kr == nil || len(kr.Keys) == 0 {
		return fmt.Errorf("an empty keyring: %w", ErrInvalid)
	}
	if a.view().Config().GetCa().GetRotation() != nil {
		// The new CA's key is sealed with the keyring's keys.
		return fmt.Errorf("the keyring cannot change while the cluster CA is rotated; finish or abort that first: %w", ErrConflict)
	}
	ids := map[string]bool{}
	for _, k := range kr.Keys {
		if k.Id == "" || len(k.Wrapped) == 0 || ids[k.Id] {
			return fmt.Errorf("keyring key %q without a wrapped key or twice: %w", k.Id, ErrInvalid)
		}
		ids[k.Id] = true
	}
	if !ids[kr.Primary] {
		return fmt.Errorf("keyring primary %q is not one of its keys: %w", kr.Primary, ErrInvalid)
	}
	cur := ""
	if old := a.view().Keyring(); old != nil {
		cur = old.Primary
	}
	if cur != c.ExpectPrimary {
		return fmt.Errorf("the keyring's primary key is %q, not %q: %w", cur, c.ExpectPrimary, ErrStale)
	}
	for _, r := range c.Envs {
		if r.Extension != "" {
			if err := a.resealExtension(r); err != nil {
				return err
			}
			continue
		}
		if r.Registry != "" {
			if err := a.resealRegistry(r); err != nil {
				return err
			}
			continue
		}
		if r.Certificate != "" || r.Acme {
			if err := a.resealTLS(r); err != nil {
				return err
			}
			continue
		}
		if r.Service != "" {
			svc, err := a.service(r.Service)
			if err != nil {
				return fmt.Errorf("resealing: %w", err)
			}
			if !slices.Equal(sortedKeys(svc.Secrets), sortedKeys(r.Config)) {
				return fmt.Errorf("resealing service %s: its secrets changed meanwhile: %w", r.Service, ErrStale)
			}
			svc.Secrets = r.Config
			a.putService(svc)
			continue
		}
		p, err := a.project(r.Project)
		if err != nil {
			return fmt.Errorf("resealing: %w", err)
		}
		env := corpusv1.EnvNamed(p, r.Env)
		if env == nil || !slices.Equal(sortedKeys(env.Config), sortedKeys(r.Config)) {
			return fmt.Errorf("resealing %s/%s: its config changed meanwhile: %w", r.Project, r.Env, ErrStale)
		}
		env.Config = r.Config
		a.putEnv(p, env)
	}
	for _, r := range c.Releases {
		rel, err := a.release(r.ReleaseId)
		if err != nil {
			return fmt.Errorf("resealing: %w", err)
		}
		if !slices.Equal(sortedKeys(rel.Config), sortedKeys(r.Config)) {
			return fmt.Errorf("resealing release %s: its config differs: %w", r.ReleaseId, ErrStale)
		}
		rel.Config = r.Config
		rel.ModifyIndex = a.index
		a.put(statedb.TableReleases, rel)
	}
	// Every sealed value must now open with the new keyring.
	v := a.view()
	check := func(what string, cfg map[string][]byte) error {
		for k, s := range cfg {
			if id, err := seal.KeyID(s); err != nil || !ids[id] {
				return fmt.Errorf("%s config %s is sealed by a key the new keyring lacks: %w", what, k, ErrStale)
			}
		}
		return nil
	}
	for _, p := range v.Projects() {
		for _, e := range p.Envs {
			if err := check(p.Name+"/"+e.Name, e.Config); err != nil {
				return err
			}
		}
	}
	for _, r := range v.AllReleases() {
		if err := check("release "+r.Id, r.Config); err != nil {
			return err
		}
	}
	for _, svc := range v.Services() {
		if err := check("service "+svc.Name, svc.Secrets); err != nil {
			return err
		}
	}
	for _, crt := range v.Certificates() {
		if err := check("certificate "+crt.Domain, certificateSealed(crt)); err != nil {
			return err
		}
	}
	if acme := v.Acme(); acme != nil && len(acme.AccountKey) > 0 {
		if err := check("acme account", map[string][]byte{"key": acme.AccountKey}); err != nil {
			return err
		}
	}
	for _, e := range v.Extensions() {
		if len(e.Secret) > 0 {
			if err := check("extension "+e.Name, map[string][]byte{"secret": e.Secret}); err != nil {
				return err
			}
		}
	}
	for _, l := range v.RegistryLogins() {
		if err := check("registry "+l.Host, map[string][]byte{"password": l.Password}); err != nil {
			return err
		}
	}
	kr = proto.Clone(kr).(*corpusv1.Keyring)
	for _, k := range kr.Keys {
		if k.CreatedAt == nil {
			k.CreatedAt = a.now
		}
	}
	kr.ModifyIndex = a.index
	a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaKeyring, Value: kr})
	return nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setWebPort points an environment's HTTP routes at the port its web
// process now listens on.
func (a *applier) setWebPort(c *corpusv1.SetWebPort) error {
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("web port %d: %w", c.Port, ErrInvalid)
	}
	if c.Instance > 1 {
		return a.setInstanceWebPort(c)
	}
	p, env, err := a.envOnNode(c.Project, c.Env, c.NodeId)
	if err != nil {
		return err
	}
	if env.WebPort == c.Port {
		return nil
	}
	env.WebPort = c.Port
	a.putEnv(p, env)
	a.pointRoutes(env)
	return nil
}
