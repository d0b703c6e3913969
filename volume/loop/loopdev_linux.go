package loop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"corpus/volume"
)

// The loop device layer: find the devices backing an image, make one,
// refresh its size, remove it. Everything goes through the kernel API
// (/dev/loop-control and ioctls on /dev/loopN), not losetup.

const (
	loopControl = "/dev/loop-control"
	sysBlock    = "/sys/block"
	loopMajor   = 7
)

// fileID identifies an image the way the loop driver reports it.
type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, st, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, st, nil
}

// loopsFor returns the loop devices (/dev/loopN, lowest N first) whose
// backing file is id. More than one means an earlier leak; callers detach
// all of them.
func loopsFor(id fileID) ([]string, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	type dev struct {
		n    int
		path string
	}
	var found []dev
	for _, e := range entries {
		n, ok := loopNumber(e.Name())
		if !ok {
			continue
		}
		// backing_file exists only while the device is bound.
		if _, err := os.Stat(filepath.Join(sysBlock, e.Name(), "loop", "backing_file")); err != nil {
			continue
		}
		path, err := devNode(n)
		if err != nil {
			return nil, err
		}
		info, err := loopStatus(path)
		if err != nil {
			if errors.Is(err, unix.ENXIO) { // unbound meanwhile
				continue
			}
			return nil, fmt.Errorf("reading status of %s: %w", path, err)
		}
		if info.Inode == id.ino && info.Device == id.dev {
			found = append(found, dev{n, path})
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].n < found[j].n })
	paths := make([]string, len(found))
	for i, d := range found {
		paths[i] = d.path
	}
	return paths, nil
}

func loopNumber(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "loop")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

func loopStatus(path string) (*unix.LoopInfo64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return unix.IoctlLoopGetStatus64(int(f.Fd()))
}

// devNode returns /dev/loopN, making the node when /dev is not a devtmpfs
// that made it already.
func devNode(n int) (string, error) {
	path := "/dev/loop" + strconv.Itoa(n)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	err := unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n))))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("making device node %s: %w", path, err)
	}
	return path, nil
}

// attachLoop binds a free loop device to image and returns its path.
// Autoclear is off: the device stays until detachLoop, so it outlives the
// agent and is found again by loopsFor.
func attachLoop(image string) (string, error) {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening image: %w", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", loopControl, err)
	}
	defer ctl.Close()

	var lastErr error
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("finding a free loop device: %w", err)
		}
		path, err := devNode(n)
		if err != nil {
			return "", err
		}
		err = configure(path, img)
		if err == nil {
			return path, nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return "", fmt.Errorf("configuring %s: %w", path, err)
		}
		// Another process took the device between GET_FREE and
		// CONFIGURE; ask for the next free one.
		lastErr = err
		time.Sleep(10 * time.Millisecond)
	}
	return "", fmt.Errorf("configuring a loop device: %w", lastErr)
}

func configure(path string, img *os.File) error {
	dev, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img.Name())
	err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		// Kernels before 5.8 have no LOOP_CONFIGURE.
		if err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err != nil {
			return err
		}
		if err = unix.IoctlLoopSetStatus64(int(dev.Fd()), &cfg.Info); err != nil {
			unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
			return err
		}
	}
	return err
}

// setCapacity makes the loop device at path re-read its backing file's
// size, after the file grew or shrank.
func setCapacity(path string) error {
	dev, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("refreshing size of %s: %w", path, err)
	}
	return nil
}

// detachWait is how long a detach waits for the kernel to let go.
const detachWait = 10 * time.Second

// detachLoop unbinds the loop device at path and waits until the kernel
// has let go of the backing file. The caller makes sure it is not mounted:
// the kernel turns a detach of an open device into autoclear instead of
// failing.
func detachLoop(path string) error {
	dev, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("detaching %s: %w", path, err)
	}
	err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
	dev.Close()
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detaching %s: %w", path, err)
	}
	name := filepath.Base(path)
	// A container that just stopped may still hold a copy of the mount
	// in its mount namespace while the kernel tears it down: on a loaded
	// host that takes seconds (a cold CI run saw more than one).
	for deadline := time.Now().Add(detachWait); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(sysBlock, name, "loop", "backing_file")); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
	}
	// Held open elsewhere (a copy of its mount in another mount
	// namespace, say): the kernel frees it when that lets go (autoclear).
	return fmt.Errorf("detaching %s: %w: still bound after %s, held open elsewhere", path, volume.ErrInUse, detachWait)
}

// waitIdle waits until nothing holds the block device at path open
// exclusively (a mounted file system does), for at most two seconds: the
// kernel may let go of a device a moment after umount returns, and
// e2fsck and offline resize2fs refuse a device in use. A device still
// busy is volume.ErrInUse; a mount of it in another mount namespace is the
// usual cause.
func waitIdle(path string) error {
	var err error
	for range 400 {
		var fd int
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("opening %s: %w", path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%w: %s is still held open after 2s: %s", volume.ErrInUse, path, holders(path))
}

// holders names the processes that have the block device at path open or
// see it mounted in their mount namespace, for an error message.
func holders(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return ""
	}
	majmin := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	seenNS := map[string]bool{}
	for _, p := range procs {
		if ns, err := os.Readlink(p + "/ns/mnt"); err == nil && !seenNS[ns] {
			seenNS[ns] = true
			if data, err := os.ReadFile(p + "/mountinfo"); err == nil && len(parseMountinfo(data, majmin)) > 0 {
				out = append(out, fmt.Sprintf("pid %s mounts it (%s)", filepath.Base(p), ns))
			}
		}
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			if t, err := os.Readlink(fd); err == nil && t == path {
				out = append(out, fmt.Sprintf("pid %s has it open", filepath.Base(p)))
				break
			}
		}
		if len(out) >= 5 {
			break
		}
	}
	return strings.Join(out, ", ")
}
