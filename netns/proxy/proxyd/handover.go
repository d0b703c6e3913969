package proxyd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"corpus/netns/proxy"
)

// The handover protocol on handover.sock, one exchange per connection:
//
//	successor -> "take\n"
//	old       -> {"names":[...]}\n with the listeners' descriptors
//	             attached (SCM_RIGHTS), in the names' order
//	old       -> {"routes":{...}}\n
//	successor -> "ready\n" once it serves on them
//
// The old process drains and exits on "ready"; on anything else (the
// successor died, or said no) it goes on serving.

// handoverTimeout bounds each step of a handover.
const handoverTimeout = 30 * time.Second

type handoverHead struct {
	Names []string `json:"names"`
}

type handoverRoutes struct {
	Routes proxy.Routes `json:"routes"`
}

// errNoPredecessor is returned by takeOver when no proxy answers.
var errNoPredecessor = errors.New("no proxy process to take over from")

// takeOver asks the proxy serving dir for its listeners and routes. The
// returned connection says ready (or, closed, no) to it.
func takeOver(dir string) (*net.UnixConn, map[string]net.Listener, proxy.Routes, error) {
	c, err := net.DialTimeout("unix", sockPath(dir, handoverSock), handoverTimeout)
	if err != nil {
		return nil, nil, proxy.Routes{}, fmt.Errorf("%w: %w", errNoPredecessor, err)
	}
	uc := c.(*net.UnixConn)
	fail := func(err error) (*net.UnixConn, map[string]net.Listener, proxy.Routes, error) {
		uc.Close()
		return nil, nil, proxy.Routes{}, fmt.Errorf("taking the listeners over: %w", err)
	}
	uc.SetDeadline(time.Now().Add(handoverTimeout))
	if _, err := uc.Write([]byte("take\n")); err != nil {
		return fail(err)
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(64*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail(err)
	}
	var files []*os.File
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return fail(err)
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fail(err)
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "inherited"))
		}
	}
	defer func() {
		for _, f := range files {
			f.Close() // the listeners made from them hold their own copies
		}
	}()
	r := bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), uc))
	var head handoverHead
	var routes handoverRoutes
	if err := readLine(r, &head); err != nil {
		return fail(err)
	}
	if err := readLine(r, &routes); err != nil {
		return fail(err)
	}
	if len(head.Names) != len(files) {
		return fail(fmt.Errorf("%d listener names for %d descriptors", len(head.Names), len(files)))
	}
	lns := make(map[string]net.Listener, len(files))
	for i, f := range files {
		ln, err := net.FileListener(f)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fail(fmt.Errorf("listener %s: %w", head.Names[i], err))
		}
		lns[head.Names[i]] = ln
	}
	uc.SetDeadline(time.Time{})
	return uc, lns, routes.Routes, nil
}

// giveListeners answers a successor on c: it sends the proxy's listeners
// and routes and reports whether the successor said ready.
func giveListeners(c *net.UnixConn, p *proxy.Proxy) (bool, error) {
	c.SetDeadline(time.Now().Add(handoverTimeout))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || line != "take\n" {
		return false, fmt.Errorf("not a handover request: %q %v", line, err)
	}
	files, err := p.Listeners()
	if err != nil {
		return false, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	names := slices.Sorted(maps.Keys(files))
	fds := make([]int, len(names))
	for i, name := range names {
		fds[i] = int(files[name].Fd())
	}
	head, _ := json.Marshal(handoverHead{Names: names})
	if _, _, err := c.WriteMsgUnix(append(head, '\n'), unix.UnixRights(fds...), nil); err != nil {
		return false, err
	}
	body, err := json.Marshal(handoverRoutes{Routes: p.Routes()})
	if err != nil {
		return false, err
	}
	if _, err := c.Write(append(body, '\n')); err != nil {
		return false, err
	}
	// The successor builds its proxy and takes the socket paths before it
	// says ready.
	c.SetDeadline(time.Now().Add(handoverTimeout))
	line, err = r.ReadString('\n')
	if err != nil || line != "ready\n" {
		return false, fmt.Errorf("the successor did not take over: %q %v", line, err)
	}
	return true, nil
}

func readLine(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}
