package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestUnknownCommandFails: a mistyped command fails with a suggestion,
// at the root and below it; a group without an argument prints its
// help and succeeds.
func TestUnknownCommandFails(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		root := NewRoot(&Globals{stdout: &stdout, stderr: &stderr})
		root.SetArgs(args)
		err := root.Execute()
		return stdout.String(), err
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"guest", "lst"}, `corpus guest: unknown command "lst"; did you mean "list"?`},
		{[]string{"logn"}, `corpus: unknown command "logn"; did you mean "login" or "logs"?`},
		{[]string{"operator", "raft", "list-peer"}, `corpus operator raft: unknown command "list-peer"; did you mean "list-peers"?`},
		{[]string{"node", "frobnicate"}, "corpus node: unknown command \"frobnicate\" (`corpus node --help` lists its commands)"},
	} {
		out, err := run(tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corpus %s = %q, %v; want an error with %q", strings.Join(tt.args, " "), out, err, tt.want)
		}
	}
	for _, args := range [][]string{{"guest"}, {"operator", "raft"}} {
		if out, err := run(args...); err != nil || !strings.Contains(out, "Available Commands:") {
			t.Errorf("corpus %s = %q, %v; want its help and success", strings.Join(args, " "), out, err)
		}
	}
	if code := Main([]string{"guest", "lst"}); code == 0 {
		t.Errorf("corpus guest lst exits 0, want non-zero")
	}
}
