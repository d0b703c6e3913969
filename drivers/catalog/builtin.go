package catalog

import (
	"path/filepath"

	"corpus/drivers"
	"corpus/drivers/lxc"
)

// The built-in drivers.
func init() {
	register("lxc", func(c Config) (drivers.Driver, error) {
		return lxc.New(lxc.Config{Path: filepath.Join(c.StateDir, "lxc"), Logger: c.Logger})
	})
}
