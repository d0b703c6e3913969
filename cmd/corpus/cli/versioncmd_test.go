package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
	"corpus/internal/version"
)

// TestVersionCommand: `corpus version`, `--version` and `version --json`
// say the version, commit, Go version and platform.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		root := NewRoot(&Globals{stdout: &stdout, stderr: &stderr})
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("corpus %s = %v (%s)", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}
	want := "corpus " + version.Version + " (commit unknown, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if got := run(args...); got != want {
			t.Errorf("corpus %s = %q, want %q", args[0], got, want)
		}
	}
	var info version.Info
	if err := json.Unmarshal([]byte(run("version", "--json")), &info); err != nil {
		t.Fatalf("corpus version --json: %v", err)
	}
	if info.Version != version.Version || info.GoVersion != runtime.Version() || info.Commit != "unknown" || info.Arch != runtime.GOARCH {
		t.Errorf("corpus version --json = %+v, want version %s, commit unknown, %s", info, version.Version, runtime.Version())
	}
}

// serverVersion is a list-peers line ending in a server version.
var serverVersion = regexp.MustCompile(`  v[0-9]+\.[0-9]+$`)

// TestListsShowVersions: list-peers shows the version each replica
// registered with and its server version, node list the version each agent reports.
func TestListsShowVersions(t *testing.T) {
	c := startCoordinator(t)
	deadline := time.Now().Add(testrun.D(10 * time.Second))
	for {
		out, err := c.run("", "operator", "raft", "list-peers")
		if err != nil {
			t.Fatalf("corpus operator raft list-peers = %v", err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) == 2 && strings.HasSuffix(lines[0], "VERSION  SERVER VERSION") && serverVersion.MatchString(strings.TrimSuffix(lines[1], " ")) && strings.Contains(lines[1], "  "+version.Version+"  ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("corpus operator raft list-peers printed:\n%s\nwant one replica of version %s and a server version", out, version.Version)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.startNodes("n1")
	out := c.want("node list", "VERSION")
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 8 || f[0] != "n1" || f[7] != "test" {
		t.Errorf("corpus node list printed:\n%s\nwant node n1 with version test (what its agent reports)", out)
	}
}
