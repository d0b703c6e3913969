package loop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// mountsOf returns the mount points in the caller's mount namespace of the
// block device at dev (matched by major:minor), in mountinfo order.
func mountsOf(dev string) ([]string, error) {
	return mountsIn("/proc/self/mountinfo", dev)
}

// mountsIn returns the mount points of the block device at dev in the
// mount table at mountinfo (a /proc/PID/mountinfo).
func mountsIn(mountinfo, dev string) ([]string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", dev, err)
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	data, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	return parseMountinfo(data, want), nil
}

// parseMountinfo returns the mount points of lines whose device is majmin.
func parseMountinfo(data []byte, majmin string) []string {
	var points []string
	for _, m := range parseMounts(data) {
		if m.majmin == majmin {
			points = append(points, m.point)
		}
	}
	return points
}

// mountEntry is one line of mountinfo.
type mountEntry struct {
	majmin string
	point  string
	// private: no shared: or master: propagation tags.
	private bool
	// bind: a bind mount of a folder of its file system (root not /).
	bind bool
}

func parseMounts(data []byte) []mountEntry {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			continue
		}
		m := mountEntry{majmin: f[2], point: unescapeMount(f[4]), private: true, bind: f[3] != "/"}
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") || strings.HasPrefix(opt, "master:") {
				m.private = false
			}
		}
		out = append(out, m)
	}
	return out
}

// mountPrivate mounts the ext4 file system on dev at target so that the
// mount does not propagate into other mount namespaces, while its unmount
// does: target is first bind-mounted onto itself, made private (out of
// any peer group it joined: on a host whose / is shared, systemd's
// default, every namespace would otherwise receive the volume) and then
// shared, a peer group of its own, and the file system goes on top.
// A namespace made from this one later (a container's start, a sandboxed
// service, `ip netns exec`) copies the volume's mount with it and, being
// a slave as such tools make their copies, loses it when Unmount unmounts
// it here; without that, its copy would keep the file system alive, and
// offline e2fsck, resize2fs and detaching the device would find it in use
// until that namespace ended. A namespace made private (unshare's
// default) keeps its copy: nothing can reach it.
func mountPrivate(dev, target string, flags uintptr, data string) error {
	if err := unix.Mount(target, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding mount point: %w", err)
	}
	if err := unix.Mount("", target, "", unix.MS_PRIVATE, ""); err != nil {
		unix.Unmount(target, unix.MNT_DETACH)
		return fmt.Errorf("making mount point private: %w", err)
	}
	if err := unix.Mount("", target, "", unix.MS_SHARED, ""); err != nil {
		unix.Unmount(target, unix.MNT_DETACH)
		return fmt.Errorf("making mount point shared: %w", err)
	}
	if err := unix.Mount(dev, target, "ext4", flags, data); err != nil {
		unix.Unmount(target, unix.MNT_DETACH)
		return err
	}
	return nil
}

// unmountPrivateBind removes the self-bind mountPrivate put under a volume
// at point, once the volume is unmounted from it: the top mount at point,
// if a bind of a folder (or private: older versions made it so) and not
// a loop device.
func unmountPrivateBind(point string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	var top *mountEntry
	for _, m := range parseMounts(data) {
		if m.point == point {
			top = &m
		}
	}
	if top == nil || !(top.private || top.bind) || strings.HasPrefix(top.majmin, strconv.Itoa(loopMajor)+":") {
		return nil
	}
	if err := unmountBusyRetry(point); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting private bind at %s: %w", point, err)
	}
	return nil
}

// unmountBusyRetry unmounts point, retrying EBUSY for up to a second: a
// fork in this process (any exec of a tool, by any goroutine) briefly
// holds copies of open descriptors, including those under point, until
// the child execs.
func unmountBusyRetry(point string) error {
	var err error
	for range 50 {
		if err = unix.Unmount(point, 0); !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
