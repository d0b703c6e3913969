package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"corpus/agent/deploy/githook"
)

// The agent's end of the hook protocol (githook): a push's request in,
// the deploy's output and exit status out.

// hookServer is the agent's end of the hook protocol.
type hookServer struct {
	path string
	ln   net.Listener
	git  *gitServer
}

// newHookServer listens on the unix socket path. Only the agent's own
// user may use it: its folder is made 0700 before the socket is bound
// (so there is no moment when others could reach it), the socket is
// 0600, and a connection from a process of any other user is closed
// unanswered.
func newHookServer(path string, git *gitServer) (*hookServer, error) {
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("hook socket folder: %w", err)
	}
	os.Remove(path) // a socket left by a previous run
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("hook socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return &hookServer{path: path, ln: ln, git: git}, nil
}

// sameUser reports whether the process at the other end of a unix
// socket connection runs as this process's user.
func sameUser(conn net.Conn) bool {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return false
	}
	return int(cred.Uid) == os.Geteuid()
}

func (h *hookServer) close() { h.ln.Close() }

// serve answers hooks until ctx ends; the pushes they hand over deploy
// under ctx.
func (h *hookServer) serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		h.close()
	}()
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return
		}
		go h.handle(ctx, conn)
	}
}

// hookOutput sends output frames to the hook; safe for concurrent use.
type hookOutput struct {
	mu   sync.Mutex
	conn net.Conn
	err  error
}

func (o *hookOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = githook.WriteFrame(o.conn, 'o', p)
	}
	// A client that went away does not stop the deploy: its outcome is
	// decided and recorded all the same.
	return len(p), nil
}

func (h *hookServer) handle(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	if !sameUser(conn) {
		return
	}
	kind, raw, err := githook.ReadFrame(conn, githook.MaxRequest)
	if err != nil || kind != 'r' {
		return
	}
	var req githook.Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return
	}
	out := &hookOutput{conn: conn}
	code := 1
	if sess := h.git.lookup(req.Session); sess == nil {
		fmt.Fprintln(out, "corpus: unknown push session")
	} else {
		code = h.git.p.push(ctx, sess, &req, out)
	}
	githook.WriteFrame(conn, 'x', []byte{byte(code)})
}
