package oci

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StopSignal is the signal that stops the image's process: its config's
// StopSignal, a name ("SIGQUIT", or "QUIT" as Docker takes it) or a
// number from 1 to 64, and SIGTERM when it names none. An error says the
// config names no signal.
func (img *Image) StopSignal() (syscall.Signal, error) {
	name := strings.TrimSpace(img.Config.StopSignal)
	if name == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("stop signal %d is not a signal (1 to 64)", n)
		}
		return syscall.Signal(n), nil
	}
	upper := strings.ToUpper(name)
	if !strings.HasPrefix(upper, "SIG") {
		upper = "SIG" + upper
	}
	if sig := unix.SignalNum(upper); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("stop signal %q is not a signal", name)
}
