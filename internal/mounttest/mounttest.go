// Package mounttest runs a test binary in a mount namespace of its own
// (unshare --mount --propagation slave), for tests that mount file
// systems: their mounts stay out of the host's namespace, so a process
// elsewhere on the host that makes a new mount namespace meanwhile (a
// container, another test, a proxy) cannot copy a test's mount and keep
// its file system busy, and a crashed test leaves no mount behind.
package mounttest

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// marker is set in the re-run process's environment.
const marker = "CORPUS_TEST_MOUNTNS"

// Main runs the tests, re-running the binary first, as root, in a mount
// namespace of its own when it is not in one yet; call it from TestMain
// with m.Run. Without root or unshare the tests run where they are.
func Main(run func() int) {
	if os.Geteuid() == 0 && os.Getenv(marker) == "" {
		if path, err := exec.LookPath("unshare"); err == nil {
			os.Setenv(marker, "1")
			args := append([]string{"unshare", "--mount", "--propagation", "slave", os.Args[0]}, os.Args[1:]...)
			err := syscall.Exec(path, args, os.Environ())
			fmt.Fprintf(os.Stderr, "running in the host's mount namespace: %v\n", err)
		}
	}
	os.Exit(run())
}
