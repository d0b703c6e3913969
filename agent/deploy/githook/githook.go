// Package githook is the protocol between the pre-receive hook of a
// project's repository on a node and the node's agent: Run is the hook's
// end (`corpus git-hook pre-receive`), the frames and the request are
// what both ends speak; Server is the agent's end, which hands each
// request to agent/deploy.
package githook

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

// The hook protocol. git-receive-pack runs the repository's pre-receive
// hook (`corpus git-hook pre-receive`) once the pack is received and before
// any ref moves. The hook connects to the agent's unix socket, sends the
// ref updates with its session token and the quarantine's object folders,
// and relays what the agent writes back to the git client (git prefixes
// it with "remote: "). Its exit status, chosen by the agent, accepts or
// rejects the push. Frames are a kind byte, a big-endian length and data:
// 'r' request (JSON), 'o' output, 'x' exit status (one byte).

// MaxRequest bounds a frame of the protocol.
const MaxRequest = 1 << 20

const (
	// EnvSocket and EnvSession tell the hook how to reach the agent.
	EnvSocket  = "CORPUS_HOOK_SOCKET"
	EnvSession = "CORPUS_HOOK_SESSION"
)

// Request is what the hook sends.
type Request struct {
	Session string      `json:"session"`
	Updates []RefUpdate `json:"updates"`
	// Git's quarantine: the objects of the push live here until the hook
	// accepts it.
	ObjectDir     string `json:"object_dir"`
	AlternateDirs string `json:"alternate_dirs"`
	Quarantine    string `json:"quarantine"`
}

// RefUpdate is one line of pre-receive's input.
type RefUpdate struct {
	Old, New, Ref string
}

const ZeroID = "0000000000000000000000000000000000000000"

// The hook is the corpus binary, which git-receive-pack runs for every
// push: it answers from this package's init. Go initialises packages in
// import path order as their imports are ready, and this one imports
// only the standard library, so the hook runs before the hundreds of
// package inits of the rest of the binary (Kubernetes' schemes, the
// API's descriptors), which it does not need: about 35 ms of a push.
func init() {
	if len(os.Args) == 3 && os.Args[1] == "git-hook" && os.Args[2] == "pre-receive" {
		os.Exit(Run(os.Stdin, os.Stdout))
	}
}

// Run is `corpus git-hook pre-receive`: it forwards the push to the
// agent and returns the exit status the agent decided.
func Run(stdin io.Reader, out io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(out, "corpus: "+format+"\n", args...)
		return 1
	}
	req := Request{
		Session:       os.Getenv(EnvSession),
		ObjectDir:     os.Getenv("GIT_OBJECT_DIRECTORY"),
		AlternateDirs: os.Getenv("GIT_ALTERNATE_OBJECT_DIRECTORIES"),
		Quarantine:    os.Getenv("GIT_QUARANTINE_PATH"),
	}
	sock := os.Getenv(EnvSocket)
	if sock == "" || req.Session == "" {
		return fail("this hook runs only under the corpus agent's git endpoint")
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return fail("unexpected pre-receive input %q", sc.Text())
		}
		req.Updates = append(req.Updates, RefUpdate{Old: f[0], New: f[1], Ref: f[2]})
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return fail("cannot reach the agent: %v", err)
	}
	defer conn.Close()
	raw, _ := json.Marshal(req)
	if err := WriteFrame(conn, 'r', raw); err != nil {
		return fail("sending the push to the agent: %v", err)
	}
	r := bufio.NewReader(conn)
	for {
		kind, data, err := ReadFrame(r, MaxRequest)
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

// WriteFrame writes one length-prefixed frame of the hook protocol.
func WriteFrame(w io.Writer, kind byte, data []byte) error {
	hdr := make([]byte, 5)
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// ReadFrame reads one frame; max bounds its size.
func ReadFrame(r io.Reader, max int) (byte, []byte, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) {
		return 0, nil, fmt.Errorf("frame of %d bytes is over %d", n, max)
	}
	data := make([]byte, n)
	_, err := io.ReadFull(r, data)
	return hdr[0], data, err
}
