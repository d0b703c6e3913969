package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/gorilla/websocket"

	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// shellScript opens a login shell in a guest, in its project's serving
// release when it has one (as corpus shell does).
const shellScript = `cd "$(ls -d /srv/projects/*/current 2>/dev/null | head -n 1)" 2>/dev/null || cd /
if command -v bash >/dev/null 2>&1; then exec bash -l; fi
exec sh -l`

// Terminal websocket messages: binary frames carry the terminal's bytes
// both ways; text frames carry these.
type shellControl struct {
	Resize *struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"resize,omitempty"`
	Exit  *int32 `json:"exit,omitempty"`
	Error string `json:"error,omitempty"`
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 16384,
	// The default check: the page's Origin must be this host.
}

// shell bridges a websocket to the API's Shell stream for the guest in
// the query, on a terminal of the size asked: the session's token makes
// the call, so its policy, the guest's project rules and the audit
// record are the API's.
func (d *Dashboard) shell(w http.ResponseWriter, r *http.Request) {
	tok, _, err := d.session(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	q := r.URL.Query()
	if !sameOrigin(r) || !validCSRF(tok, q.Get("csrf")) {
		writeError(w, http.StatusForbidden, "a terminal needs the session's csrf parameter, from this site")
		return
	}
	guest := q.Get("guest")
	if guest == "" {
		writeError(w, http.StatusBadRequest, "name the guest: /ui/shell?guest=NAME")
		return
	}
	size := &corpusv1.TerminalSize{Cols: queryUint(q.Get("cols"), 80), Rows: queryUint(q.Get("rows"), 24)}
	if !sensible(size.Cols, size.Rows) {
		size.Cols, size.Rows = 80, 24
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer ws.Close()
	ws.SetReadLimit(64 << 10)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	client, base := d.cfg.Dial()
	guests := corpusv1connect.NewGuestServiceClient(client, base, connect.WithInterceptors(rpc.Bearer(tok)))
	stream := guests.Shell(ctx)
	defer stream.CloseResponse()
	var wmu sync.Mutex
	write := func(kind int, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return ws.WriteMessage(kind, p)
	}
	control := func(c shellControl) {
		b, _ := json.Marshal(c)
		write(websocket.TextMessage, b)
		wmu.Lock()
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		wmu.Unlock()
	}
	first := &corpusv1.ShellInput{
		Open: &corpusv1.ExecGuestRequest{Name: guest, Argv: []string{"/bin/sh", "-c", shellScript}},
		Tty:  true, Term: "xterm-256color", Size: size,
	}
	if err := stream.Send(first); err != nil {
		control(shellControl{Error: callMessage(stream.Receive())})
		return
	}
	// Browser to guest.
	go func() {
		defer cancel()
		for {
			kind, p, err := ws.ReadMessage()
			if err != nil {
				stream.CloseRequest()
				return
			}
			in := &corpusv1.ShellInput{}
			switch kind {
			case websocket.BinaryMessage:
				in.Stdin = p
			case websocket.TextMessage:
				var c shellControl
				if json.Unmarshal(p, &c) != nil || c.Resize == nil || !sensible(c.Resize.Cols, c.Resize.Rows) {
					continue
				}
				in.Size = &corpusv1.TerminalSize{Cols: c.Resize.Cols, Rows: c.Resize.Rows}
			default:
				continue
			}
			if stream.Send(in) != nil {
				return
			}
		}
	}()
	// Guest to browser.
	for {
		out, err := stream.Receive()
		if err != nil {
			if ctx.Err() == nil {
				control(shellControl{Error: callMessage(nil, err)})
			}
			return
		}
		for _, b := range [][]byte{out.Stdout, out.Stderr} {
			if len(b) > 0 && write(websocket.BinaryMessage, b) != nil {
				return
			}
		}
		if out.Exited {
			code := out.ExitCode
			control(shellControl{Exit: &code})
			return
		}
	}
}

// callMessage is what a failed stream says, for the page.
func callMessage(_ *corpusv1.ExecOutput, err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	if err == nil {
		return "the terminal ended"
	}
	return err.Error()
}

func queryUint(s string, def uint32) uint32 {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return def
	}
	return uint32(n)
}

// sensible reports whether a terminal size is one a screen could show.
func sensible(cols, rows uint32) bool {
	return cols > 0 && rows > 0 && cols <= 1000 && rows <= 1000
}
