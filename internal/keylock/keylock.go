// Package keylock serialises work per key (a volume name, say) while
// work on different keys runs concurrently.
package keylock

import "sync"

// Map holds one mutex per key, made on first use. The zero value is
// ready; a Map must not be copied after first use.
type Map struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Lock locks key and returns its unlock.
func (m *Map) Lock(key string) func() {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[string]*sync.Mutex{}
	}
	l, ok := m.locks[key]
	if !ok {
		l = &sync.Mutex{}
		m.locks[key] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}
