package loop

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

const nsEnv = "CORPUS_VOLUME_TEST_MOUNTNS"

// TestMain re-runs the tests, as root, in a mount namespace of their own
// (unshare --mount --propagation slave). Their mounts then stay out of the
// host's namespace, so a process elsewhere on the host that makes a new
// mount namespace meanwhile (a container, another test) cannot copy a test
// mount and keep its file system busy; and a crashed test leaves no mount
// behind.
func TestMain(m *testing.M) {
	if os.Geteuid() == 0 && os.Getenv(nsEnv) == "" {
		if path, err := exec.LookPath("unshare"); err == nil {
			os.Setenv(nsEnv, "1")
			args := append([]string{"unshare", "--mount", "--propagation", "slave", os.Args[0]}, os.Args[1:]...)
			err := syscall.Exec(path, args, os.Environ())
			fmt.Fprintf(os.Stderr, "running in the host's mount namespace: %v\n", err)
		}
	}
	os.Exit(m.Run())
}
