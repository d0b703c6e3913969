// Package version holds what this binary was built from, set by the
// linker (-X corpus/internal/version.Version=... and .Commit=...).
package version

import (
	"fmt"
	"runtime"
)

// Version is the release or `git describe` of the tree this binary was
// built from ("dev" when built without the Makefile).
var Version = "dev"

// Commit is the short hash of the commit this binary was built from
// ("" when unknown).
var Commit = ""

// Info is what a binary says about its build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// Get returns this binary's build information.
func Get() Info {
	c := Commit
	if c == "" {
		c = "unknown"
	}
	return Info{Version: Version, Commit: c, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// String is the one line `corpus version` prints.
func (i Info) String() string {
	return fmt.Sprintf("corpus %s (commit %s, %s, %s/%s)", i.Version, i.Commit, i.GoVersion, i.OS, i.Arch)
}
