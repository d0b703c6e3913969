package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The processes of a release made from an OCI image run chrooted in the
// image's tree, which has no /proc and no devices of its own. The
// supervisor starts them through itself (ChrootCommand) in a mount
// namespace of their own (Go makes its mounts private first): there the
// command binds the guest's /proc into the tree (with the guest's masks
// and read-only parts), mounts a small /dev with the usual devices bound
// from the guest's, makes /tmp when the image has none, and runs the
// process in the tree. The mounts exist in that namespace only: they go
// when the process does, whatever ends it, and nothing else in the guest
// sees them (a prune's rm -rf of the release never meets them).

// ChrootCommand is the supervisor's command that runs a process in an
// image's tree: corpus-supervisor chroot [-net OUTER:INNER] ROOT DIR UID
// GID -- ARGV... (-net: a network of its own, ownnet.go).
const ChrootCommand = "chroot"

// relayDrain is how long a process's relay gives what the process sent
// before it ended to reach its clients (ownnet.go).
const relayDrain = 5 * time.Second

// devices are the nodes an image's /dev gets, bound from the guest's.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// chrootCmd is the command that runs argv in root (RunChrooted): the
// supervisor's binary self, as the guest's root, in a new mount
// namespace, leading a process group; in a network of its own when n is
// set.
func chrootCmd(self, root, dir string, uid, gid int, n ownNet, argv []string) *exec.Cmd {
	args := []string{ChrootCommand}
	if n != (ownNet{}) {
		args = append(args, NetFlag, n.String())
	}
	args = append(append(args, root, dir, strconv.Itoa(uid), strconv.Itoa(gid), "--"), argv...)
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	return cmd
}

// runAs is how a process runs: chrooted in root (when set), as uid:gid.
func runAs(root string, uid, gid int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Chroot: root}
	if uid != 0 || gid != 0 {
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if root != "" {
			// An image's user may listen on the ports below 1024 the
			// routes lead to, as in a container of Docker's.
			a.AmbientCaps = []uintptr{unix.CAP_NET_BIND_SERVICE}
		}
	}
	return a
}

// RunChrooted is ChrootCommand: args are [-net OUTER:INNER] ROOT DIR UID
// GID -- ARGV. In the mount namespace its caller made, it mounts what a
// process expects in ROOT (mountRuntime), then runs ARGV there in DIR as
// UID:GID with this process's environment and standard files, and
// returns its exit status (or ends by the signal that ended it); with
// -net, in a network of its own that OUTER leads to (ownnet.go). It
// ignores the signals it gets: the supervisor signals the whole group,
// the process included, and this one ends with the process. An error
// says why the process did not run.
func RunChrooted(args []string) (int, error) {
	var own ownNet
	if len(args) > 1 && args[0] == NetFlag {
		n, err := parseOwnNet(args[1])
		if err != nil {
			return 2, err
		}
		own, args = n, args[2:]
	}
	if len(args) < 6 || args[4] != "--" {
		return 2, errors.New("usage: corpus-supervisor chroot [-net OUTER:INNER] ROOT DIR UID GID -- CMD [ARGS]")
	}
	root, dir, argv := args[0], args[1], args[5:]
	uid, err := strconv.Atoi(args[2])
	if err != nil {
		return 2, fmt.Errorf("uid %q: %w", args[2], err)
	}
	gid, err := strconv.Atoi(args[3])
	if err != nil {
		return 2, fmt.Errorf("gid %q: %w", args[3], err)
	}
	if !filepath.IsAbs(root) || root == "/" {
		return 2, fmt.Errorf("root %q is not an absolute path below /", root)
	}
	if err := mountRuntime(root); err != nil {
		return 127, err
	}
	var r *relay
	if own != (ownNet{}) {
		// From here this goroutine's thread is in the process's
		// network, and the process starts from it.
		ln, err := enterOwnNet(own)
		if err != nil {
			return 127, err
		}
		r = startRelay(ln, own)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Dir: dir, Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: runAs(root, uid, gid)}
	err = cmd.Run()
	if r != nil {
		r.close(relayDrain)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 127, err
		}
		return 0, nil
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		signal.Reset(ws.Signal())
		syscall.Kill(os.Getpid(), ws.Signal())
		return 128 + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}

// mountRuntime gives the tree at root, in this process's mount
// namespace, the guest's /proc, a /dev of its own (a small tmpfs with
// the devices bound from the guest's, the fd links, a shm), and a /tmp
// when it has none (made in the tree, on the guest's disk).
func mountRuntime(root string) error {
	proc, err := mountPoint(root, "proc", 0o555)
	if err != nil {
		return err
	}
	if err := unix.Mount("/proc", proc, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding /proc in the image's tree: %w", err)
	}
	dev, err := mountPoint(root, "dev", 0o755)
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("mounting /dev in the image's tree: %w", err)
	}
	for _, name := range devices {
		if _, err := os.Stat("/dev/" + name); err != nil {
			continue // the guest has none to give
		}
		node := filepath.Join(dev, name)
		if err := os.WriteFile(node, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, node, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s in the image's tree: %w", name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777"); err != nil {
		return fmt.Errorf("mounting /dev/shm in the image's tree: %w", err)
	}
	tmp := filepath.Join(root, "tmp")
	if _, err := os.Lstat(tmp); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(tmp, 0o700); err != nil {
			return err
		}
		return os.Chmod(tmp, 0o777|fs.ModeSticky)
	}
	return nil
}

// mountPoint is root/name, made a folder when missing; one that is
// something else (a symlink, which would lead the mount elsewhere, or a
// file) is refused.
func mountPoint(root, name string, mode fs.FileMode) (string, error) {
	p := filepath.Join(root, name)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return p, os.Mkdir(p, mode)
	}
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("the image's /%s is not a folder (%s), so nothing can be mounted there", name, fi.Mode().Type())
	}
	return p, nil
}
