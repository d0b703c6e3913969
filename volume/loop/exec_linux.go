package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// run runs an ext4 tool with argv (never a shell) and returns its combined
// output; a failure carries the tool's exit code and last output line.
func (b *Backend) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	b.log.Debug("running", "cmd", name, "args", args)
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		return text, &toolError{tool: name, err: err, output: text}
	}
	return text, nil
}

// toolError is a failed ext4 tool run.
type toolError struct {
	tool   string
	err    error
	output string
}

func (e *toolError) Error() string {
	// The last lines say why; keep the error short.
	last := e.output
	if len(last) > 400 {
		last = "..." + last[len(last)-400:]
	}
	last = strings.ReplaceAll(last, "\n", "; ")
	if last == "" {
		return fmt.Sprintf("%s: %v", e.tool, e.err)
	}
	return fmt.Sprintf("%s: %v: %s", e.tool, e.err, last)
}

func (e *toolError) Unwrap() error { return e.err }

// exitCode returns the exit code of a failed tool run, or -1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// fsck checks and repairs the file system at target with e2fsck -f and
// repair mode (-y or -p). Exit codes 0 and 1 (errors fixed) are success.
func (b *Backend) fsck(ctx context.Context, target, mode string) error {
	_, err := b.run(ctx, "e2fsck", "-f", mode, target)
	if err != nil && exitCode(err) != 1 {
		return fmt.Errorf("checking file system: %w", err)
	}
	return nil
}
