package githook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Server is the agent's end of the protocol: a push's request in, the
// deploy's output and exit status out.
type Server struct {
	path string
	ln   net.Listener
}

// Handler runs the deploy of a push's request, writes its output to out
// and returns the hook's exit status (0 accepts the push).
type Handler func(ctx context.Context, req *Request, out io.Writer) int

// Listen listens on the unix socket path. Only the agent's own user may
// use it: its folder is made 0700 before the socket is bound (so there is
// no moment when others could reach it), the socket is 0600, and a
// connection from a process of any other user is closed unanswered.
func Listen(path string) (*Server, error) {
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
	return &Server{path: path, ln: ln}, nil
}

// Path is the socket's path (EnvSocket).
func (s *Server) Path() string { return s.path }

// Close stops listening.
func (s *Server) Close() { s.ln.Close() }

// Serve answers hooks with h until ctx ends (or Close); the pushes they
// hand over deploy under ctx.
func (s *Server) Serve(ctx context.Context, h Handler) {
	go func() {
		<-ctx.Done()
		s.Close()
	}()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go handle(ctx, conn, h)
	}
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

// output sends output frames to the hook; safe for concurrent use.
type output struct {
	mu   sync.Mutex
	conn net.Conn
	err  error
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = WriteFrame(o.conn, 'o', p)
	}
	// A client that went away does not stop the deploy: its outcome is
	// decided and recorded all the same.
	return len(p), nil
}

func handle(ctx context.Context, conn net.Conn, h Handler) {
	defer conn.Close()
	if !sameUser(conn) {
		return
	}
	kind, raw, err := ReadFrame(conn, MaxRequest)
	if err != nil || kind != 'r' {
		return
	}
	var req Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return
	}
	code := h(ctx, &req, &output{conn: conn})
	WriteFrame(conn, 'x', []byte{byte(code)})
}
