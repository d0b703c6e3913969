//go:build linux

package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"corpus/drivers"
)

// defaultPath is the PATH of an Exec that sets none: the guest agent
// runs commands with exactly the environment it is given.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// agentTimeout bounds one guest agent command (seconds), not the Exec.
const agentTimeout = 10

// agentCommand is a QEMU guest agent request.
type agentCommand struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

type guestExecArgs struct {
	Path          string   `json:"path"`
	Arg           []string `json:"arg,omitempty"`
	Env           []string `json:"env,omitempty"`
	InputData     string   `json:"input-data,omitempty"`
	CaptureOutput bool     `json:"capture-output"`
}

type guestExecStatus struct {
	Exited   bool   `json:"exited"`
	ExitCode int    `json:"exitcode"`
	Signal   int    `json:"signal"`
	OutData  string `json:"out-data"`
	ErrData  string `json:"err-data"`
}

// Exec runs argv in the guest through the QEMU guest agent. The guest
// agent collects the command's output and hands it over when the command
// ends, so Stdout and Stderr are written then. It returns
// drivers.ErrNotRunning when the guest is not running and an error when
// the guest agent does not answer (the guest is still booting, say).
func (d *Driver) Exec(ctx context.Context, name string, req drivers.ExecRequest) (int, error) {
	if len(req.Argv) == 0 {
		return -1, fmt.Errorf("exec in %s: no command", name)
	}
	l, err := d.client()
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", name, err)
	}
	dom, meta, err := d.lookup(l, name)
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", name, err)
	}
	if state, _, err := l.DomainGetState(dom, 0); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", name, err)
	} else if golibvirt.DomainState(state) != golibvirt.DomainRunning {
		return -1, fmt.Errorf("exec in %s: %w", name, drivers.ErrNotRunning)
	}
	args := guestExecArgs{CaptureOutput: true, Env: execEnv(meta.Env, req.Env)}
	argv := execArgv(req)
	args.Path, args.Arg = argv[0], argv[1:]
	if req.Stdin != nil {
		in, err := io.ReadAll(req.Stdin)
		if err != nil {
			return -1, fmt.Errorf("exec in %s: reading stdin: %w", name, err)
		}
		args.InputData = base64.StdEncoding.EncodeToString(in)
	}
	var started struct {
		PID int `json:"pid"`
	}
	if err := agentCall(l, dom, agentCommand{Execute: "guest-exec", Arguments: args}, &started, agentTimeout); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", name, err)
	}
	wait := 20 * time.Millisecond
	for {
		var st guestExecStatus
		if err := agentCall(l, dom, agentCommand{Execute: "guest-exec-status", Arguments: map[string]int{"pid": started.PID}}, &st, agentTimeout); err != nil {
			return -1, fmt.Errorf("exec in %s: %w", name, err)
		}
		if st.Exited {
			if err := writeB64(req.Stdout, st.OutData); err != nil {
				return -1, fmt.Errorf("exec in %s: stdout: %w", name, err)
			}
			if err := writeB64(req.Stderr, st.ErrData); err != nil {
				return -1, fmt.Errorf("exec in %s: stderr: %w", name, err)
			}
			if st.Signal != 0 {
				return 128 + st.Signal, nil
			}
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("exec in %s: %w", name, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, 250*time.Millisecond)
	}
}

// execArgv wraps req.Argv so it runs in req.Dir as req.UID/GID; the
// guest agent itself can do neither. Values are passed as arguments,
// never spliced into the shell script.
func execArgv(req drivers.ExecRequest) []string {
	argv := req.Argv
	if req.UID != 0 || req.GID != 0 {
		argv = append([]string{"setpriv", "--reuid=" + strconv.Itoa(req.UID), "--regid=" + strconv.Itoa(req.GID), "--clear-groups", "--"}, argv...)
	}
	if req.Dir != "" {
		argv = append([]string{"/bin/sh", "-c", `cd -- "$1" && shift && exec "$@"`, "sh", req.Dir}, argv...)
	}
	return argv
}

// execEnv is the environment of an Exec: a default PATH and HOME, the
// guest's environment, then the request's.
func execEnv(guest []envXML, req map[string]string) []string {
	env := map[string]string{"PATH": defaultPath, "HOME": "/root"}
	for _, e := range guest {
		env[e.Name] = e.Value
	}
	for k, v := range req {
		env[k] = v
	}
	var out []string
	for _, e := range envList(env) {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

// agentCall sends one command to the guest agent, waiting at most
// timeout seconds for it, and decodes its return.
func agentCall(l *golibvirt.Libvirt, dom golibvirt.Domain, cmd agentCommand, ret any, timeout int32) error {
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	res, err := l.QEMUDomainAgentCommand(dom, string(b), timeout, 0)
	if err != nil {
		return fmt.Errorf("guest agent %s: %w", cmd.Execute, err)
	}
	if len(res) == 0 {
		return fmt.Errorf("guest agent %s: empty answer", cmd.Execute)
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal([]byte(res[0]), &reply); err != nil {
		return fmt.Errorf("guest agent %s: decoding answer: %w", cmd.Execute, err)
	}
	if err := json.Unmarshal(reply.Return, ret); err != nil {
		return fmt.Errorf("guest agent %s: decoding answer: %w", cmd.Execute, err)
	}
	return nil
}

func writeB64(w io.Writer, s string) error {
	if w == nil || s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
