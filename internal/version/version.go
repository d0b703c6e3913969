// Package version holds the build's version, set by the linker
// (-X corpus/internal/version.Version=...).
package version

// Version is the release or commit this binary was built from.
var Version = "dev"
