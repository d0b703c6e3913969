//go:build linux && !amd64

package libvirt

import (
	"errors"
	"time"
)

var errTooSlow = errors.New("too slow")

// probeDeadline is unused off x86-64, where kvmSpeed does not probe.
const probeDeadline = 200 * time.Millisecond

// errNotProbed: the probe's guest code is x86; elsewhere KVM is trusted
// once QEMU's user can open the node.
var errNotProbed = errors.New("KVM's speed is probed on x86-64 only")

func kvmSpeed(string, time.Duration) (time.Duration, error) { return 0, errNotProbed }
