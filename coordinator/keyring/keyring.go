// Package keyring is the one encryption path of the cluster's secrets:
// environments' config, services' secrets, certificates' keys,
// extensions' credentials and registries' passwords are sealed with the replicated keyring, whose
// keys are wrapped with a key-encryption key each replica derives from
// the cluster CA.
package keyring

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/seal"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// Writer commits a command through Raft, its error an API error.
type Writer interface {
	Write(ctx context.Context, cmd *corpusv1.Command) (uint64, error)
}

// Ring opens the replicated keyring with the key-encryption key this
// replica derives from the cluster CA, and remembers the opened keys
// until the keyring changes.
type Ring struct {
	store *state.Store
	// cas are the CAs whose keys this replica holds: during a rotation
	// of the cluster CA, the old and the new one (none: sealed values
	// cannot be opened here).
	cas func() []*pki.CA
	w   Writer
	mu  sync.Mutex
	idx uint64 // ModifyIndex of the keyring opened
	k   *seal.Keyring
}

// New returns the keyring of store, opened with the key-encryption key
// of one of cas and changed through w.
func New(store *state.Store, cas func() []*pki.CA, w Writer) *Ring {
	return &Ring{store: store, cas: cas, w: w}
}

// errNoKEK says a replica cannot open sealed values.
var errNoKEK = errors.New("this coordinator has no cluster CA key to open sealed values with")

// Open returns the keyring as of view, nil when the cluster has none yet.
func (r *Ring) Open(view *state.Snap) (*seal.Keyring, error) {
	kr := view.Keyring()
	if kr == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.k != nil && r.idx == kr.ModifyIndex {
		return r.k, nil
	}
	keys, err := r.unwrap(kr)
	if err != nil {
		return nil, err
	}
	k, err := seal.NewKeyring(kr.Primary, keys)
	if err != nil {
		return nil, err
	}
	r.k, r.idx = k, kr.ModifyIndex
	return k, nil
}

// ErrWrongKEK: a keyring's data keys do not open with the CA given.
var ErrWrongKEK = errors.New("the keyring does not open with that CA's key")

// Rewrap wraps the data keys of kr, wrapped for the CA from, for the CA
// to, so that the sealed values kr opens open with to's key (a snapshot
// of another cluster restored into this one).
func Rewrap(kr *corpusv1.Keyring, from, to *pki.CA) error {
	fromKEK, err := from.SealKEK()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWrongKEK, err)
	}
	toKEK, err := to.SealKEK()
	if err != nil {
		return fmt.Errorf("this coordinator cannot wrap the keyring for the cluster CA (%w): restore through a replica that holds the CA key", err)
	}
	for _, k := range kr.Keys {
		key, err := seal.Unwrap(fromKEK, k.Wrapped, k.Id)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrWrongKEK, err)
		}
		if k.Wrapped, err = seal.Wrap(toKEK, key, k.Id); err != nil {
			return err
		}
	}
	return nil
}

// unwrap opens the data keys of kr with the key-encryption key of the
// first CA held that opens them all: the cluster CA's, which during a CA
// rotation is the old one until the rotation ends.
func (r *Ring) unwrap(kr *corpusv1.Keyring) (map[string][]byte, error) {
	var cas []*pki.CA
	if r.cas != nil {
		cas = r.cas()
	}
	if len(cas) == 0 {
		return nil, errNoKEK
	}
	var err error
	for _, ca := range cas {
		var kek []byte
		if kek, err = ca.SealKEK(); err != nil {
			continue
		}
		keys := map[string][]byte{}
		for _, k := range kr.Keys {
			var key []byte
			if key, err = seal.Unwrap(kek, k.Wrapped, k.Id); err != nil {
				break
			}
			keys[k.Id] = key
		}
		if err == nil {
			return keys, nil
		}
	}
	return nil, fmt.Errorf("the cluster keyring does not open with this coordinator's CA key (%w): every replica must hold the same cluster CA", err)
}

// kek is the key-encryption key new keys are wrapped with: the cluster
// CA's (during a rotation, the old CA's).
func (r *Ring) kek() ([]byte, error) {
	var cas []*pki.CA
	if r.cas != nil {
		cas = r.cas()
	}
	if len(cas) == 0 {
		return nil, errNoKEK
	}
	ca := pki.FindCA(cas, r.store.Read().Config().GetCa().GetCertPem())
	if ca == nil {
		ca = cas[0] // a cluster never rotated: the replica's own
	}
	return ca.SealKEK()
}

// Ensure returns the keyring, making the cluster's first one if needed.
func (r *Ring) Ensure(ctx context.Context) (*seal.Keyring, error) {
	for range 3 {
		k, err := r.Open(r.store.Read())
		if err != nil || k != nil {
			return k, err
		}
		kr, _, err := r.newKeyring()
		if err != nil {
			return nil, err
		}
		_, err = r.w.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetKeyring{SetKeyring: &corpusv1.SetKeyring{Keyring: kr}}})
		if err != nil && connect.CodeOf(err) != connect.CodeAborted && connect.CodeOf(err) != connect.CodeAlreadyExists {
			return nil, err
		}
		// Made here or by a concurrent call: read it back.
	}
	return nil, connect.NewError(connect.CodeAborted, errors.New("the cluster keyring kept changing; try again"))
}

// newKeyring is a keyring of one fresh key, wrapped, and that key.
func (r *Ring) newKeyring() (*corpusv1.Keyring, map[string][]byte, error) {
	kek, err := r.kek()
	if err != nil {
		return nil, nil, err
	}
	id := "k" + secret.Hex(6)
	key := seal.NewKey()
	w, err := seal.Wrap(kek, key, id)
	if err != nil {
		return nil, nil, err
	}
	return &corpusv1.Keyring{Primary: id, Keys: []*corpusv1.SealKey{{Id: id, Wrapped: w}}}, map[string][]byte{id: key}, nil
}

// OpenConfig opens an environment's (or release's) sealed config.
func OpenConfig(k *seal.Keyring, project, env string, cfg map[string][]byte) (map[string]string, error) {
	return OpenSealed(k, cfg, func(key string) string { return state.ConfigPlace(project, env, key) })
}

// OpenSecrets opens a service's sealed secrets.
func OpenSecrets(k *seal.Keyring, service string, secrets map[string][]byte) (map[string]string, error) {
	return OpenSealed(k, secrets, func(key string) string { return state.ServicePlace(service, key) })
}

// OpenSealed opens sealed values, each sealed for place(its key).
func OpenSealed(k *seal.Keyring, values map[string][]byte, place func(key string) string) (map[string]string, error) {
	out := make(map[string]string, len(values))
	if len(values) == 0 {
		return out, nil
	}
	if k == nil {
		return nil, errors.New("sealed values but no keyring")
	}
	for key, v := range values {
		p, err := k.Open(v, place(key))
		if err != nil {
			return nil, err
		}
		out[key] = string(p)
	}
	return out, nil
}

// SealAll seals values, each for place(its key).
func SealAll(k *seal.Keyring, values map[string]string, place func(key string) string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(values))
	for key, v := range values {
		s, err := k.Seal([]byte(v), place(key))
		if err != nil {
			return nil, err
		}
		out[key] = s
	}
	return out, nil
}

// Rotate makes a new key the keyring's only one and reseals every value.
func (r *Ring) Rotate(ctx context.Context) (*corpusv1.RotateKeyringResponse, error) {
	for range 3 {
		view := r.store.Read()
		old, err := r.Open(view)
		if err != nil {
			return nil, err
		}
		kr, keys, err := r.newKeyring()
		if err != nil {
			return nil, err
		}
		next, err := seal.NewKeyring(kr.Primary, keys)
		if err != nil {
			return nil, err
		}
		cmd := &corpusv1.SetKeyring{Keyring: kr}
		res := &corpusv1.RotateKeyringResponse{Primary: kr.Primary}
		if old != nil {
			cmd.ExpectPrimary, res.Previous = old.Primary(), old.Primary()
		}
		resealAt := func(values map[string][]byte, place func(string) string) (map[string][]byte, error) {
			clear, err := OpenSealed(old, values, place)
			if err != nil {
				return nil, err
			}
			res.Resealed += int32(len(clear))
			return SealAll(next, clear, place)
		}
		reseal := func(project, env string, cfg map[string][]byte) (map[string][]byte, error) {
			return resealAt(cfg, func(k string) string { return state.ConfigPlace(project, env, k) })
		}
		for _, p := range view.Projects() {
			for _, e := range p.Envs {
				if len(e.Config) == 0 {
					continue
				}
				cfg, err := reseal(p.Name, e.Name, e.Config)
				if err != nil {
					return nil, err
				}
				cmd.Envs = append(cmd.Envs, &corpusv1.ResealedConfig{Project: p.Name, Env: e.Name, Config: cfg})
			}
			for _, e := range p.Envs {
				for _, rel := range view.Releases(p.Name, e.Name) {
					if len(rel.Config) == 0 {
						continue
					}
					cfg, err := reseal(p.Name, e.Name, rel.Config)
					if err != nil {
						return nil, err
					}
					cmd.Releases = append(cmd.Releases, &corpusv1.ResealedConfig{Project: p.Name, Env: e.Name, ReleaseId: rel.Id, Config: cfg})
				}
			}
		}
		for _, svc := range view.Services() {
			if len(svc.Secrets) == 0 {
				continue
			}
			secrets, err := resealAt(svc.Secrets, func(k string) string { return state.ServicePlace(svc.Name, k) })
			if err != nil {
				return nil, err
			}
			cmd.Envs = append(cmd.Envs, &corpusv1.ResealedConfig{Service: svc.Name, Config: secrets})
		}
		tls, err := resealTLS(view, resealAt)
		if err != nil {
			return nil, err
		}
		cmd.Envs = append(cmd.Envs, tls...)
		for _, e := range view.Extensions() {
			if len(e.Secret) == 0 {
				continue
			}
			name := e.Name
			sealed, err := resealAt(map[string][]byte{"secret": e.Secret}, func(string) string { return state.ExtensionPlace(name) })
			if err != nil {
				return nil, err
			}
			cmd.Envs = append(cmd.Envs, &corpusv1.ResealedConfig{Extension: name, Config: sealed})
		}
		for _, l := range view.RegistryLogins() {
			host := l.Host
			sealed, err := resealAt(map[string][]byte{"password": l.Password}, func(string) string { return state.RegistryPlace(host) })
			if err != nil {
				return nil, err
			}
			cmd.Envs = append(cmd.Envs, &corpusv1.ResealedConfig{Registry: host, Config: sealed})
		}
		_, err = r.w.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetKeyring{SetKeyring: cmd}})
		if err == nil {
			return res, nil
		}
		if connect.CodeOf(err) != connect.CodeAborted {
			return nil, err
		}
	}
	return nil, connect.NewError(connect.CodeAborted, errors.New("config kept changing while the keyring rotated; try again"))
}

// Changes says how a sealed config differs from another, keys only.
func (r *Ring) Changes(view *state.Snap, project, env string, before, after map[string][]byte) ([]string, error) {
	if len(before) == 0 && len(after) == 0 {
		return nil, nil
	}
	k, err := r.Open(view)
	if err != nil {
		return nil, err
	}
	b, err := OpenConfig(k, project, env, before)
	if err != nil {
		return nil, err
	}
	a, err := OpenConfig(k, project, env, after)
	if err != nil {
		return nil, err
	}
	return ConfigChanges(b, a), nil
}

// resealTLS reseals the certificates' keys and the ACME account key for
// a keyring rotation.
func resealTLS(view *state.Snap, resealAt func(map[string][]byte, func(string) string) (map[string][]byte, error)) ([]*corpusv1.ResealedConfig, error) {
	var out []*corpusv1.ResealedConfig
	for _, c := range view.Certificates() {
		vals := map[string][]byte{}
		if len(c.Key) > 0 {
			vals["key"] = c.Key
		}
		if k := c.Challenge.GetAlpnKey(); len(k) > 0 {
			vals["challenge"] = k
		}
		if len(vals) == 0 {
			continue
		}
		domain := c.Domain
		sealed, err := resealAt(vals, func(name string) string {
			if name == "challenge" {
				return state.ChallengeKeyPlace(domain)
			}
			return state.CertificateKeyPlace(domain)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, &corpusv1.ResealedConfig{Certificate: domain, Config: sealed})
	}
	if a := view.Acme(); a != nil && len(a.AccountKey) > 0 {
		sealed, err := resealAt(map[string][]byte{"key": a.AccountKey}, func(string) string { return state.AcmeKeyPlace })
		if err != nil {
			return nil, err
		}
		out = append(out, &corpusv1.ResealedConfig{Acme: true, Config: sealed})
	}
	return out, nil
}

// ConfigChanges says how cfg differs from the config of the release
// before, keys only: "+KEY" new, "~KEY" changed, "-KEY" gone.
func ConfigChanges(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		old, ok := before[k]
		switch {
		case !ok:
			out = append(out, "+"+k)
		case old != v:
			out = append(out, "~"+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, "-"+k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][1:] < out[j][1:] })
	return out
}
