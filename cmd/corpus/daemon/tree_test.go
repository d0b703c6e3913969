package daemon

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"corpus/client"
	"corpus/cmd/corpus/cli"
	"corpus/coordinator"
)

// TestOneTree: the hosts' commands hang from the client commands' root
// as one tree: add-k8s beside the client's node commands, and a
// mistyped command refused with suggestions from both.
func TestOneTree(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		root := cli.NewRoot(cli.NewGlobals(&stdout, &stderr), Commands)
		root.SetArgs(args)
		err := root.Execute()
		return stdout.String(), err
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"gest", "list"}, `corpus: unknown command "gest"; did you mean "agent" or "guest"?`},
		{[]string{"image", "bild"}, `corpus image: unknown command "bild"; did you mean "build"?`},
		{[]string{"node", "add-k9s"}, `corpus node: unknown command "add-k9s"; did you mean "add-k8s"?`},
	} {
		out, err := run(tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corpus %s = %q, %v; want an error with %q", strings.Join(tt.args, " "), out, err, tt.want)
		}
	}
	out, err := run("node", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"add-k8s", "list", "token"} {
		if !strings.Contains(out, "  "+want+" ") {
			t.Errorf("corpus node --help lists no %s:\n%s", want, out)
		}
	}
}

// TestCAFileHint: where the client commands say a coordinator keeps the
// cluster CA (they cannot import the coordinator to ask) is where it
// keeps it.
func TestCAFileHint(t *testing.T) {
	t.Parallel()
	want := filepath.Join("DATA_DIR", coordinator.TLSDir, coordinator.CACertFile)
	if _, err := client.Trust(client.Environment{Address: "127.0.0.1:7400"}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("client.Trust without a CA = %v, want an error naming %s", err, want)
	}
	root := cli.NewRoot(cli.NewGlobals(io.Discard, io.Discard), Commands)
	if f := root.PersistentFlags().Lookup("ca-cert"); f == nil || !strings.Contains(f.Usage, want) {
		t.Errorf("--ca-cert's usage does not name %s", want)
	}
}
