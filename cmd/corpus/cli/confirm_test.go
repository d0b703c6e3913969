package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"corpus/internal/testrun"
)

// TestDestructiveCommandsAsk: project delete, service delete, volume
// delete and node remove ask on a terminal and go on only on yes; with
// no terminal (a script, --json too) they refuse unless --yes, and a
// refusal changes nothing.
func TestDestructiveCommandsAsk(t *testing.T) {
	c := startCoordinator(t)
	c.want("project create hello --detach")
	c.want("service create pay --external https://pay.example.test")

	// No terminal: refused before anything is asked of the cluster (a
	// volume or node that is not there would be "not found" otherwise).
	for _, args := range []string{
		"project delete hello", "project delete hello --env dev --keep-volumes", "--json project delete hello",
		"service delete pay", "service delete pay --purge", "volume delete nope", "node remove nope",
	} {
		out, err := c.run("y\n", strings.Fields(args)...)
		if !errors.Is(err, errNotConfirmed) || !strings.Contains(err.Error(), "confirm with --yes (nothing was changed)") {
			t.Errorf("corpus %s with stdin not a terminal = %q, %v; want it refused, asking for --yes", args, out, err)
		}
	}
	c.want("project show hello", "Env dev:")
	c.want("service show pay", "https://pay.example.test")

	// A terminal: anything but yes refuses.
	for _, answer := range []string{"n\n", "\n", "yes please\n"} {
		if out, prompt, err := c.runOnTerminal(answer, "project", "delete", "hello"); !errors.Is(err, errNotConfirmed) ||
			!strings.Contains(prompt, "Delete project hello, with its guests and data volumes? [y/N] ") {
			t.Errorf("project delete answered %q = %q, %v (asked %q); want the question asked and a refusal", answer, out, err, prompt)
		}
	}
	c.want("project show hello", "Env dev:")
	if out, prompt, err := c.runOnTerminal("y\n", "service", "delete", "pay", "--purge"); err != nil || !strings.Contains(out, "service pay deleted") ||
		!strings.Contains(prompt, "Delete service pay with its data volume and its backups? [y/N] ") {
		t.Errorf("service delete --purge answered y = %q, %v (asked %q); want it deleted", out, err, prompt)
	}
	c.wantErr("service show pay", "not found")

	// --yes (or -y) asks nothing and goes ahead.
	c.want("project delete hello --yes", "project hello deleted")
	c.wantErr("project show hello", "not found")
	c.wantErr("volume delete nope -y", "not found")
	c.wantErr("node remove nope --yes", "not found")
}

// runOnTerminal runs one command line with a terminal as its stdin, on
// which answer is typed; it returns stdout, stderr (the question) and
// the command's error.
func (c *cliTarget) runOnTerminal(answer string, args ...string) (string, string, error) {
	c.t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		c.t.Fatalf("opening a terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if _, err := ptmx.Write([]byte(answer)); err != nil {
		c.t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	root := NewRoot(&Globals{stdout: &stdout, stderr: &stderr})
	root.SetArgs(append(append([]string{}, c.flags...), args...))
	root.SetIn(tty)
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(30*time.Second))
	defer cancel()
	err = root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}
