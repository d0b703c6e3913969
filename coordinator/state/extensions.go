package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/extensions"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// Extensions: the operators' admission extensions (package extensions),
// their secrets sealed with the cluster keyring like config values. A
// write that would make their order cyclic is refused, naming the cycle.

// ExtensionPlace is what an extension's secret is sealed for.
func ExtensionPlace(name string) string { return "extension/" + name }

func (a *applier) putExtension(c *corpusv1.PutExtension) error {
	if c.Extension == nil {
		return fmt.Errorf("no extension: %w", ErrInvalid)
	}
	e := proto.Clone(c.Extension).(*corpusv1.Extension)
	if err := extensions.Check(e); err != nil {
		return fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	cur, _ := a.get(statedb.TableExtensions, "id", e.Name).(*corpusv1.Extension)
	if cur != nil && !c.Replace {
		return fmt.Errorf("extension %s: %w", e.Name, ErrExists)
	}
	if len(e.Secret) > 0 {
		if err := a.checkSealed("extension", map[string][]byte{"secret": e.Secret}); err != nil {
			return err
		}
	}
	others := slices.DeleteFunc(a.view().Extensions(), func(o *corpusv1.Extension) bool { return o.Name == e.Name })
	if _, err := extensions.Order(append(others, e)); err != nil {
		return fmt.Errorf("adding %s: %v: %w", e.Name, err, ErrInvalid)
	}
	e.CreateIndex, e.ModifyIndex = a.index, a.index
	if cur != nil {
		e.CreateIndex, e.CreatedAt = cur.CreateIndex, cur.CreatedAt
	}
	a.put(statedb.TableExtensions, e)
	return nil
}

func (a *applier) deleteExtension(c *corpusv1.DeleteExtension) error {
	cur := a.get(statedb.TableExtensions, "id", c.Name)
	if cur == nil {
		return fmt.Errorf("extension %s: %w", c.Name, ErrNotFound)
	}
	a.del(statedb.TableExtensions, cur)
	return nil
}

// resealExtension replaces an extension's sealed secret in a keyring
// rotation.
func (a *applier) resealExtension(r *corpusv1.ResealedConfig) error {
	cur, _ := a.get(statedb.TableExtensions, "id", r.Extension).(*corpusv1.Extension)
	if cur == nil || len(cur.Secret) == 0 || len(r.Config["secret"]) == 0 {
		return fmt.Errorf("resealing extension %s: its secret changed meanwhile: %w", r.Extension, ErrStale)
	}
	e := proto.Clone(cur).(*corpusv1.Extension)
	e.Secret, e.ModifyIndex = r.Config["secret"], a.index
	a.put(statedb.TableExtensions, e)
	return nil
}
