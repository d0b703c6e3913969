package state

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	"corpus/internal/imageref"
	corpusv1 "corpus/proto/corpus/v1"
)

// RegistryPlace is what a registry login's password is sealed for.
func RegistryPlace(host string) string { return "registry/" + host }

// putRegistryLogin sets a registry's credentials: its host as pulls name
// it, its password sealed with the keyring's primary key.
func (a *applier) putRegistryLogin(c *corpusv1.PutRegistryLogin) error {
	l := c.GetLogin()
	if host, err := imageref.Registry(l.GetHost()); err != nil || host != l.Host || len(l.Password) == 0 {
		return fmt.Errorf("registry login %.80q: a host not as pulls name it, or no password: %w", l.GetHost(), ErrInvalid)
	}
	if err := a.checkSealed("registry "+l.Host, map[string][]byte{"password": l.Password}); err != nil {
		return err
	}
	cur, _ := a.get(statedb.TableRegistryLogins, "id", l.Host).(*corpusv1.RegistryLogin)
	l = proto.Clone(l).(*corpusv1.RegistryLogin)
	l.CreateIndex, l.ModifyIndex = a.index, a.index
	if cur != nil {
		l.CreateIndex = cur.CreateIndex
	}
	a.put(statedb.TableRegistryLogins, l)
	return nil
}

func (a *applier) deleteRegistryLogin(c *corpusv1.DeleteRegistryLogin) error {
	cur := a.get(statedb.TableRegistryLogins, "id", c.Host)
	if cur == nil {
		return fmt.Errorf("registry login %s: %w", c.Host, ErrNotFound)
	}
	a.del(statedb.TableRegistryLogins, cur)
	return nil
}

// resealRegistry replaces a registry's sealed password in a rotation.
func (a *applier) resealRegistry(r *corpusv1.ResealedConfig) error {
	cur, _ := a.get(statedb.TableRegistryLogins, "id", r.Registry).(*corpusv1.RegistryLogin)
	if cur == nil || len(r.Config["password"]) == 0 {
		return fmt.Errorf("resealing registry %s: its login changed meanwhile: %w", r.Registry, ErrStale)
	}
	l := proto.Clone(cur).(*corpusv1.RegistryLogin)
	l.Password, l.ModifyIndex = r.Config["password"], a.index
	a.put(statedb.TableRegistryLogins, l)
	return nil
}
