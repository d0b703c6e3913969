package volume

import "sync"

// Gate decides whether a node goes ahead with resizing a volume to its
// desired size, before it stops anything for it (a guest, a mount), and
// remembers the resizes it refused, so that a reconciler neither stops
// a guest for a resize that cannot be done nor reports the refusal more
// than once.
//
// It is level-based: every pass asks again with what the volume uses
// now, and a refusal holds only for the size it refused; a new desired
// size is judged afresh. A shrink refused only once the volume was
// offline (the file system's own minimum is above what the margin
// allows for) is not tried again at that size until the volume uses
// less than it did then.
//
// The zero Gate is ready to use; it is safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	refused map[string]Refusal // by volume name
}

// Refusal is a resize a node will not do.
type Refusal struct {
	// Size is the refused size; Used the bytes in use when it was refused.
	Size, Used int64
	// Err says why; it wraps ErrCannotShrink or ErrInvalid.
	Err error
	// offline: refused by the backend with the volume offline.
	offline bool
}

// Admit returns nil when volume name, whose file system is from bytes
// with used bytes in use now, may be resized to size to. Otherwise it
// returns why not, an error wrapping ErrInvalid (a size no backend
// makes, see CheckSize) or ErrCannotShrink (the data would not fit with
// ShrinkMargin to spare); nothing needs undoing then. changed is true
// when the refusal differs from the one standing before: the caller
// reports it then, once.
func (g *Gate) Admit(name string, from, to, used int64) (changed bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.refused[name]; ok && r.offline && r.Size == to && used >= r.Used {
		return false, r.Err
	}
	err = CheckSize(to)
	if err == nil && to < from {
		err = CheckShrink(used, to, true)
	}
	if err == nil {
		delete(g.refused, name)
		return false, nil
	}
	return g.set(name, Refusal{Size: to, Used: used, Err: err}), err
}

// Refuse records that the backend refused to shrink volume name to size,
// with used bytes in use, once the volume was offline: err wraps
// ErrCannotShrink. Admit refuses that size again, without stopping
// anything, until the volume uses fewer bytes. It returns whether the
// refusal differs from the one standing before.
func (g *Gate) Refuse(name string, size, used int64, err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.set(name, Refusal{Size: size, Used: used, Err: err, offline: true})
}

func (g *Gate) set(name string, r Refusal) bool {
	if g.refused == nil {
		g.refused = map[string]Refusal{}
	}
	old, ok := g.refused[name]
	g.refused[name] = r
	return !ok || old.Size != r.Size || old.Err.Error() != r.Err.Error()
}

// Refused returns the refusal standing for volume name at size, if any.
func (g *Gate) Refused(name string, size int64) (Refusal, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.refused[name]
	return r, ok && r.Size == size
}

// Forget drops what the gate holds of volume name: it is at its desired
// size, or gone.
func (g *Gate) Forget(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.refused, name)
}
