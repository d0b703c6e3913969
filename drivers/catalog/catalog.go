// Package catalog lists the built-in drivers and builds them by name. The
// list itself is in builtin.go; registering a name twice panics.
package catalog

import (
	"fmt"
	"log/slog"
	"sort"

	"corpus/drivers"
)

// Config is what every driver factory gets.
type Config struct {
	// StateDir is the agent's state folder; a driver keeps its files in
	// its own sub-folder of it.
	StateDir string
	Logger   *slog.Logger
}

// Factory builds one driver instance.
type Factory func(Config) (drivers.Driver, error)

var factories = map[string]Factory{}

func register(name string, f Factory) {
	if _, dup := factories[name]; dup {
		panic("catalog: driver " + name + " registered twice")
	}
	factories[name] = f
}

// Names returns the built-in driver names, sorted.
func Names() []string {
	out := make([]string, 0, len(factories))
	for n := range factories {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds the named driver.
func New(name string, cfg Config) (drivers.Driver, error) {
	f, ok := factories[name]
	if !ok {
		return nil, fmt.Errorf("driver %q: %w (built in: %v)", name, drivers.ErrNotSupported, Names())
	}
	return f(cfg)
}
