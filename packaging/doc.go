// Package packaging holds what the Debian package installs besides the
// binary: the systemd units, the commented default configs and the
// maintainer scripts (see nfpm.yaml and `make deb`). It has no code; its
// tests check those files.
package packaging
