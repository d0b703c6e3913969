package supervisor

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecInRelease: a shell's command gets what the release's processes
// get (the environment file's config, HOME, PATH) over what it was given,
// which it keeps otherwise, CORPUS_PROCESS=shell and no PORT; without a
// readable file it says so and runs with the base.
func TestExecInRelease(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "r3.json")
	if err := os.WriteFile(file, []byte(`{"DATABASE_URL":"postgres://app:s3cret@db/app"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(file string) (string, string) {
		t.Helper()
		b, _ := json.Marshal([]string{dir, file, "sh", "-c", `echo "$DATABASE_URL|$HOME|$CORPUS_PROCESS|$PORT|$EXTRA|$PATH"`})
		cmd := exec.Command(os.Args[0])
		cmd.Env = []string{"CORPUS_TEST_EXECINRELEASE=" + string(b), "EXTRA=kept", "PATH=/nowhere:/usr/bin:/bin"}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ExecInRelease: %v: %s", err, stderr.String())
		}
		return strings.TrimSpace(string(out)), stderr.String()
	}
	want := "postgres://app:s3cret@db/app|" + dir + "|shell||kept|" + BasePath
	if got, _ := run(file); got != want {
		t.Errorf("ExecInRelease printed %q, want %q", got, want)
	}
	got, stderr := run(filepath.Join(dir, "missing.json"))
	if want := "|" + dir + "|shell||kept|" + BasePath; got != want || !strings.Contains(stderr, "running without the release's environment") {
		t.Errorf("without the file: printed %q (stderr %q), want %q and a warning", got, stderr, want)
	}
}
