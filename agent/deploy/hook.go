package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The hook protocol. git-receive-pack runs the repository's pre-receive
// hook (`corpus git-hook pre-receive`) once the pack is received and before
// any ref moves. The hook connects to the agent's unix socket, sends the
// ref updates with its session token and the quarantine's object folders,
// and relays what the agent writes back to the git client (git prefixes
// it with "remote: "). Its exit status, chosen by the agent, accepts or
// rejects the push. Frames are a kind byte, a big-endian length and data:
// 'r' request (JSON), 'o' output, 'x' exit status (one byte).

const maxHookRequest = 1 << 20

// hookRequest is what the hook sends.
type hookRequest struct {
	Session string      `json:"session"`
	Updates []refUpdate `json:"updates"`
	// Git's quarantine: the objects of the push live here until the hook
	// accepts it.
	ObjectDir     string `json:"object_dir"`
	AlternateDirs string `json:"alternate_dirs"`
	Quarantine    string `json:"quarantine"`
}

// refUpdate is one line of pre-receive's input.
type refUpdate struct {
	Old, New, Ref string
}

const zeroID = "0000000000000000000000000000000000000000"

// RunHook is `corpus git-hook pre-receive`: it forwards the push to the
// agent and returns the exit status the agent decided.
func RunHook(stdin io.Reader, out io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(out, "corpus: "+format+"\n", args...)
		return 1
	}
	req := hookRequest{
		Session:       os.Getenv(hookEnvSession),
		ObjectDir:     os.Getenv("GIT_OBJECT_DIRECTORY"),
		AlternateDirs: os.Getenv("GIT_ALTERNATE_OBJECT_DIRECTORIES"),
		Quarantine:    os.Getenv("GIT_QUARANTINE_PATH"),
	}
	sock := os.Getenv(hookEnvSocket)
	if sock == "" || req.Session == "" {
		return fail("this hook runs only under the corpus agent's git endpoint")
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return fail("unexpected pre-receive input %q", sc.Text())
		}
		req.Updates = append(req.Updates, refUpdate{Old: f[0], New: f[1], Ref: f[2]})
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return fail("cannot reach the agent: %v", err)
	}
	defer conn.Close()
	raw, _ := json.Marshal(req)
	if err := frame(conn, 'r', raw); err != nil {
		return fail("sending the push to the agent: %v", err)
	}
	r := bufio.NewReader(conn)
	for {
		kind, data, err := readFrame(r, maxHookRequest)
		if err != nil {
			return fail("the agent went away during the deploy (%v); the push is refused", err)
		}
		switch kind {
		case 'o':
			out.Write(data)
		case 'x':
			if len(data) != 1 {
				return fail("bad exit frame from the agent")
			}
			return int(data[0])
		}
	}
}

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
		o.err = frame(o.conn, 'o', p)
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
	kind, raw, err := readFrame(conn, maxHookRequest)
	if err != nil || kind != 'r' {
		return
	}
	var req hookRequest
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
	frame(conn, 'x', []byte{byte(code)})
}
