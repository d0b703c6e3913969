package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestEnvironmentVariables: CORPUS_TOKEN, CORPUS_ADDR and CORPUS_CA_CERT
// choose the coordinator and the credential of a command, and --help
// prints none of their values (the token is a secret; what --help
// prints goes to terminals, logs and the generated docs).
func TestEnvironmentVariables(t *testing.T) {
	c := startCoordinator(t)
	token := c.flags[3]
	t.Setenv("CORPUS_ADDR", c.addr)
	t.Setenv("CORPUS_TOKEN", token)
	t.Setenv("CORPUS_CA_CERT", c.caFile)
	t.Setenv("CORPUS_ENV", "")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	run := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		root := NewRoot(NewGlobals(&stdout, &stderr))
		root.SetArgs(append([]string{"--config-file", cfg}, args...))
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(30*time.Second))
		defer cancel()
		err := root.ExecuteContext(ctx)
		return stdout.String() + stderr.String(), err
	}
	if out, err := run("status"); err != nil || !strings.Contains(out, "you are ops") {
		t.Errorf("corpus status with CORPUS_* set = %q, %v; want it answered for the operator", out, err)
	}
	for _, args := range [][]string{{"--help"}, {"status", "--help"}, {"guest", "list", "--help"}} {
		out, err := run(args...)
		if err != nil {
			t.Fatalf("corpus %s = %v", strings.Join(args, " "), err)
		}
		for _, v := range []string{token, c.addr, c.caFile} {
			if strings.Contains(out, v) {
				t.Errorf("corpus %s prints %q, the value of a CORPUS_* variable:\n%s", strings.Join(args, " "), v, out)
			}
		}
	}
}
