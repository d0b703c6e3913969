package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"corpus/drivers"
)

// Exec runs argv in the guest's newest ready pod through the API server's
// exec subresource (WebSocket, falling back to SPDY), which needs a
// kubelet on the pod's node. The exec API has no environment, folder or
// user of its own: Env and Dir are applied by `env` and `sh` inside the
// pod, passed as arguments (never as a command line); a UID or GID other
// than 0 returns ErrNotSupported. No ready pod returns ErrNotRunning.
func (d *Driver) Exec(ctx context.Context, name string, req drivers.ExecRequest) (int, error) {
	if len(req.Argv) == 0 {
		return 0, errors.New("exec: empty command")
	}
	if req.UID != 0 || req.GID != 0 {
		return 0, fmt.Errorf("exec as uid %d gid %d: %w (pods run commands as the image's user)", req.UID, req.GID, drivers.ErrNotSupported)
	}
	w, err := d.workload(ctx, name)
	if err != nil {
		return 0, err
	}
	pods, err := d.pods(ctx, w.meta.Labels[LabelGuestID])
	if err != nil {
		return 0, err
	}
	var pod *corev1.Pod
	for i := range pods {
		if podReady(pods[i]) {
			pod = &pods[i]
			break
		}
	}
	if pod == nil {
		return 0, fmt.Errorf("guest %s has no ready pod: %w", name, drivers.ErrNotRunning)
	}
	u := d.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.ns).Name(pod.Name).SubResource("exec").
		VersionedParams(execOptions(req), scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(d.rest, "GET", u.String())
	if err != nil {
		return 0, fmt.Errorf("exec in pod %s: %w", pod.Name, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(d.rest, "POST", u)
	if err != nil {
		return 0, fmt.Errorf("exec in pod %s: %w", pod.Name, err)
	}
	ex, _ := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	opts := remotecommand.StreamOptions{Stdin: req.Stdin, Stdout: orDiscard(req.Stdout), Stderr: orDiscard(req.Stderr)}
	if req.TTY != nil {
		// One stream on a terminal: the kubelet gives the container one.
		opts.Stderr, opts.Tty, opts.TerminalSizeQueue = nil, true, sizeQueue(req.TTY)
	}
	err = ex.StreamWithContext(ctx, opts)
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitStatus(), nil
	}
	return 0, fmt.Errorf("exec in pod %s: %w", pod.Name, err)
}

// execOptions are the exec subresource's parameters for req.
func execOptions(req drivers.ExecRequest) *corev1.PodExecOptions {
	return &corev1.PodExecOptions{
		Container: containerName, Command: execArgv(req),
		Stdin: req.Stdin != nil, Stdout: true, Stderr: req.TTY == nil, TTY: req.TTY != nil,
	}
}

// sizeQueue passes window sizes on to the exec stream; nil ends it.
type sizeQueue <-chan drivers.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	sz, ok := <-q
	if !ok {
		return nil
	}
	return &remotecommand.TerminalSize{Width: sz.Cols, Height: sz.Rows}
}

// execArgv wraps argv so the environment and folder of req apply:
//
//	env K=V ... sh -c 'cd "$1" && shift && exec "$@"' sh DIR ARGV...
//
// Values travel as arguments; nothing is parsed by a shell.
func execArgv(req drivers.ExecRequest) []string {
	argv := req.Argv
	if req.Dir != "" {
		argv = append([]string{"sh", "-c", `cd "$1" && shift && exec "$@"`, "sh", req.Dir}, argv...)
	}
	if len(req.Env) > 0 {
		keys := make([]string, 0, len(req.Env))
		for k := range req.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pre := []string{"env"}
		for _, k := range keys {
			pre = append(pre, k+"="+req.Env[k])
		}
		if strings.HasPrefix(argv[0], "-") || strings.Contains(argv[0], "=") {
			pre = append(pre, "--")
		}
		argv = append(pre, argv...)
	}
	return argv
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
