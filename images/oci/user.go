package oci

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// Command is what the image runs: its entrypoint followed by its cmd.
func (img *Image) Command() []string { return img.Argv(nil, nil) }

// Argv is what the image runs with its entrypoint replaced by command
// and its cmd by args where they are given, as a Kubernetes container's
// command and args replace them (and docker run's --entrypoint and
// arguments): a command without args runs without the image's cmd.
func (img *Image) Argv(command, args []string) []string {
	entrypoint, cmd := img.Config.Entrypoint, img.Config.Cmd
	if len(command) > 0 {
		entrypoint, cmd = command, nil
	}
	if len(args) > 0 {
		cmd = args
	}
	return append(append([]string(nil), entrypoint...), cmd...)
}

// LookupUser resolves an image config's user ("", "name", "uid",
// "name:group", "uid:gid") to numeric ids, reading names from the tree
// at rootfs (its /etc/passwd and /etc/group, resolved inside the tree).
// "" is root. A user given by number without a group takes the group of
// its passwd entry, or its own number when it has none.
func LookupUser(rootfs, user string) (uid, gid uint32, err error) {
	if user == "" {
		return 0, 0, nil
	}
	name, group, hasGroup := strings.Cut(user, ":")
	entry, found, err := lookup(rootfs, "etc/passwd", name)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case found:
		if uid, err = parseID(entry[2]); err != nil {
			return 0, 0, fmt.Errorf("user %s in /etc/passwd: %w", name, err)
		}
		if gid, err = parseID(entry[3]); err != nil {
			return 0, 0, fmt.Errorf("user %s in /etc/passwd: %w", name, err)
		}
	default:
		if uid, err = parseID(name); err != nil {
			return 0, 0, fmt.Errorf("user %q is not in the image's /etc/passwd and not a number", name)
		}
		gid = uid
	}
	if !hasGroup {
		return uid, gid, nil
	}
	entry, found, err = lookup(rootfs, "etc/group", group)
	if err != nil {
		return 0, 0, err
	}
	if found {
		if gid, err = parseID(entry[2]); err != nil {
			return 0, 0, fmt.Errorf("group %s in /etc/group: %w", group, err)
		}
		return uid, gid, nil
	}
	if gid, err = parseID(group); err != nil {
		return 0, 0, fmt.Errorf("group %q is not in the image's /etc/group and not a number", group)
	}
	return uid, gid, nil
}

// lookup finds the line of file (inside rootfs) whose first field, or
// third (its id), is key; it returns the line's fields. A missing file
// finds nothing.
func lookup(rootfs, file, key string) ([]string, bool, error) {
	f, err := openInTree(rootfs, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the image's /%s: %w", file, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 4 && fields[0] == key {
			return fields, true, nil
		}
	}
	return nil, false, sc.Err()
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("id %q is not a number", s)
	}
	return uint32(n), nil
}
