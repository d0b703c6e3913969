package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goTestJSON runs go test -json with args in a module of its own holding
// the test file src, and returns its events.
func goTestJSON(t *testing.T, src string, args ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"go.mod": "module sample\n\ngo 1.21\n", "sample_test.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, _ := cmd.Output() // a failing test exits non-zero: the events say why
	if !bytes.Contains(out, []byte(`"Action":"start"`)) {
		t.Fatalf("go test -json printed no events:\n%s", out)
	}
	return out
}

// TestGroupLines: a real go test run's events become the console lines
// test/run shows: tests as they start and end with their times, their
// log lines, a failed test's own output, and a failing exit status.
func TestGroupLines(t *testing.T) {
	events := goTestJSON(t, `package sample

import "testing"

func TestFine(t *testing.T) { t.Log("figure: 42 requests, 0 failed") }

func TestBroken(t *testing.T) {
	t.Log("the guest said: creating")
	t.Fatal("not reached within 30s")
}

func TestSkipped(t *testing.T) { t.Skip("skipping: no KVM here") }
`)
	var out, log bytes.Buffer
	logPath := filepath.Join(t.TempDir(), "group.log")
	failuresPath := filepath.Join(t.TempDir(), "group.failures")
	code := run([]string{"-group", "e2e", "-tests", "-log", logPath, "-failures", failuresPath}, bytes.NewReader(events), &out, &log)
	if code != 1 {
		t.Errorf("exit status %d, want 1 (a test failed)", code)
	}
	got := out.String()
	for _, want := range []string{
		`^\[e2e \d+s\] RUN  TestFine$`,
		`^\[e2e \d+s\]      TestFine: sample_test.go:5: figure: 42 requests, 0 failed$`,
		`^\[e2e \d+s\] PASS TestFine \(\d+\.\ds\)$`,
		`^\[e2e \d+s\] FAIL sample TestBroken \(\d+\.\ds\)$`,
		`^\[e2e\]   \|     sample_test.go:8: the guest said: creating$`,
		`^\[e2e\]   \|     sample_test.go:9: not reached within 30s$`,
		`^\[e2e \d+s\] SKIP TestSkipped: sample_test.go:12: skipping: no KVM here$`,
		`^\[e2e \d+s\] FAIL sample \(\d+\.\ds\)$`,
	} {
		if !regexp.MustCompile(`(?m)` + want).MatchString(got) {
			t.Errorf("no line matches %s in:\n%s", want, got)
		}
	}
	logged, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(logged), "not reached within 30s") {
		t.Errorf("the log lacks the tests' output (%v):\n%s", err, logged)
	}
	// The account test/run prints again at its end: the failed test
	// and its lines, nothing of the tests that passed.
	account, err := os.ReadFile(failuresPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := `^\[e2e\] FAIL sample TestBroken \(\d+\.\ds\)
\[e2e\]   sample_test.go:8: the guest said: creating
\[e2e\]   sample_test.go:9: not reached within 30s
$`; !regexp.MustCompile(want).Match(account) {
		t.Errorf("the account of the failures:\n%s\nwant it to match\n%s", account, want)
	}
}

// TestNoAccountWhenPassing: a group that passed writes no account.
func TestNoAccountWhenPassing(t *testing.T) {
	events := goTestJSON(t, `package sample

import "testing"

func TestFine(t *testing.T) { t.Log("fine") }
`)
	failuresPath := filepath.Join(t.TempDir(), "group.failures")
	var out, errs bytes.Buffer
	if code := run([]string{"-group", "unit", "-failures", failuresPath}, bytes.NewReader(events), &out, &errs); code != 0 {
		t.Errorf("exit status %d, want 0:\n%s%s", code, out.String(), errs.String())
	}
	if _, err := os.Stat(failuresPath); !os.IsNotExist(err) {
		t.Errorf("a passing group wrote an account (%v)", err)
	}
}

// TestDyingBinary: when a test binary dies on -test.timeout, the lines
// say which test was running, what it last said (what it waited for),
// and the binary's panic; while it ran, a silent stretch was filled with
// what ran.
func TestDyingBinary(t *testing.T) {
	events := goTestJSON(t, `package sample

import (
	"testing"
	"time"
)

func TestHangs(t *testing.T) {
	t.Log("waiting for guest web: creating on n2")
	time.Sleep(time.Hour)
}
`, "-timeout", "3s")
	var out, errs bytes.Buffer
	failuresPath := filepath.Join(t.TempDir(), "group.failures")
	if code := run([]string{"-group", "unit", "-failures", failuresPath}, bytes.NewReader(events), &out, &errs); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if account, err := os.ReadFile(failuresPath); err != nil || !regexp.MustCompile(`(?m)^\[unit\] FAIL sample TestHangs: was running when the test binary died
\[unit\]   sample_test.go:\d+: waiting for guest web: creating on n2
\[unit\]   panic: test timed out after 3s$`).Match(account) {
		t.Errorf("the account of the dead binary (%v):\n%s", err, account)
	}
	got := out.String()
	for _, want := range []string{
		`(?m)^\[unit \d+s\] FAIL sample \(\d+\.\ds\)$`,
		`(?m)^\[unit \d+s\]      TestHangs was running for \d+s; its last lines:$`,
		`(?m)^\[unit\]   \| .*waiting for guest web: creating on n2$`,
		`(?m)^\[unit\]   \| panic: test timed out after 3s$`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("no line matches %s in:\n%s", want, got)
		}
	}
}

// TestHeartbeat: a minute without a line prints what runs, for how
// long, and its last line; before a test starts, that the group builds.
func TestHeartbeat(t *testing.T) {
	var out bytes.Buffer
	t0 := time.Now()
	p := &printer{group: "k8s", every: time.Minute, out: &out, start: t0, printed: t0, running: map[string]*test{}, panicked: map[string][]string{}}
	p.heartbeat(t0.Add(30 * time.Second))
	if out.Len() != 0 {
		t.Fatalf("a heartbeat within the minute: %q", out.String())
	}
	p.heartbeat(t0.Add(61 * time.Second))
	if !strings.Contains(out.String(), "...  building or starting (no test running yet)") {
		t.Errorf("before any test: %q", out.String())
	}
	out.Reset()
	p.handle(event{Action: "start", Package: "corpus/test/e2e"})
	p.handle(event{Action: "run", Package: "corpus/test/e2e", Test: "TestKubernetesNode"})
	p.handle(event{Action: "output", Package: "corpus/test/e2e", Test: "TestKubernetesNode", Output: "    k8s_test.go:40: waiting for the API server's build: 812 packages\n"})
	p.handle(event{Action: "run", Package: "corpus/test/e2e", Test: "TestKubernetesNode/sub"})
	p.heartbeat(time.Now().Add(2 * time.Minute))
	got := out.String()
	if !regexp.MustCompile(`(?m)^\[k8s \d+s\] \.\.\.  TestKubernetesNode running for 2m0s: k8s_test.go:40: waiting for the API server's build: 812 packages$`).MatchString(got) {
		t.Errorf("heartbeat: %q", got)
	}
	if strings.Contains(got, "TestKubernetesNode/sub") || strings.Contains(got, "test/e2e running") {
		t.Errorf("a subtest or the package spoke beside its running test: %q", got)
	}
}

// TestAccountOutlivesADump: a failed check followed by a helper's long
// dump (a daemon's log, one t.Log per line, more than the kept tail) is
// still in the account, and the dump counts once.
func TestAccountOutlivesADump(t *testing.T) {
	events := goTestJSON(t, `package sample

import "testing"

func TestDumps(t *testing.T) {
	t.Error("list-peers shows every version: not reached")
	for i := 0; i < 60; i++ {
		t.Log("daemon line", i)
	}
}
`)
	failuresPath := filepath.Join(t.TempDir(), "group.failures")
	var out, errs bytes.Buffer
	if code := run([]string{"-group", "e2erace", "-failures", failuresPath}, bytes.NewReader(events), &out, &errs); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	account, err := os.ReadFile(failuresPath)
	if want := `^\[e2erace\] FAIL sample TestDumps \(\d+\.\ds\)
\[e2erace\]   sample_test.go:6: list-peers shows every version: not reached
\[e2erace\]   sample_test.go:8: daemon line 0
$`; err != nil || !regexp.MustCompile(want).Match(account) {
		t.Errorf("the account (%v):\n%s\nwant it to match\n%s", err, account, want)
	}
}

// TestAccountKeepsACheckOutput: a failed check that prints a command's
// output under its own line (stdout, stderr) keeps those lines in the
// account, its first and last up to a limit; a repeated place in the
// code still counts once.
func TestAccountKeepsACheckOutput(t *testing.T) {
	events := goTestJSON(t, `package sample

import (
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	t.Fatalf("corpus project create = exit 1\nstdout: \nstderr: Error: no node has the image\n" + strings.Repeat("more\n", 20))
}
`)
	failuresPath := filepath.Join(t.TempDir(), "group.failures")
	var out, errs bytes.Buffer
	if code := run([]string{"-group", "e2e", "-failures", failuresPath}, bytes.NewReader(events), &out, &errs); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	account, err := os.ReadFile(failuresPath)
	if want := `^\[e2e\] FAIL sample TestCLI \(\d+\.\ds\)
\[e2e\]   sample_test.go:9: corpus project create = exit 1
\[e2e\]     stdout:
\[e2e\]     stderr: Error: no node has the image
\[e2e\]     more
\[e2e\]     more
\[e2e\]     …
(\[e2e\]     more\n){12}$`; err != nil || !regexp.MustCompile(want).Match(account) {
		t.Errorf("the account (%v):\n%s\nwant it to match\n%s", err, account, want)
	}
}

// TestAccountKeepsALogsEnd: a daemon's log dumped under one line keeps,
// in the account, its first lines and its last (where the check
// failed), not the goroutines the daemon wrote on SIGQUIT after it; the
// first daemons' logs each have their place, after the failed check.
func TestAccountKeepsALogsEnd(t *testing.T) {
	events := goTestJSON(t, `package sample

import (
	"fmt"
	"strings"
	"testing"
)

func TestNode(t *testing.T) {
	t.Error("node n1 ready: not reached")
	var log strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&log, "agent line %d\n", i)
	}
	log.WriteString("SIGQUIT: quit\ngoroutine 1 [running]:\nmain.main()\n")
	for _, name := range []string{"agent n1", "agent n1", "agent n2", "agent n3", "agent n4", "coordinator"} {
		t.Log("--- log of " + name + " ---\n" + log.String())
	}
}
`)
	failuresPath := filepath.Join(t.TempDir(), "group.failures")
	var out, errs bytes.Buffer
	if code := run([]string{"-group", "e2e", "-failures", failuresPath}, bytes.NewReader(events), &out, &errs); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	account, err := os.ReadFile(failuresPath)
	if want := `^\[e2e\] FAIL sample TestNode \(\d+\.\ds\)
\[e2e\]   sample_test.go:10: node n1 ready: not reached
\[e2e\]   sample_test.go:17: --- log of agent n1 ---
\[e2e\]     agent line 0
\[e2e\]     agent line 1
\[e2e\]     agent line 2
\[e2e\]     agent line 3
\[e2e\]     …
(\[e2e\]     agent line (2[89]|3\d)\n){12}\[e2e\]   sample_test.go:17: --- log of agent n2 ---
`; err != nil || !regexp.MustCompile(want).Match(account) {
		t.Errorf("the account (%v):\n%s\nwant it to match\n%s", err, account, want)
	}
	// Four daemons' logs, each once, after the check: the next is left
	// to the full output.
	// A daemon (a restarted agent) dumped again counts once.
	if n, n1 := strings.Count(string(account), "--- log of "), strings.Count(string(account), "--- log of agent n1 ---"); n != 4 || n1 != 1 || strings.Contains(string(account), "coordinator") {
		t.Errorf("the account holds %d daemons' logs (%d of agent n1), want the first 4, each once:\n%s", n, n1, account)
	}
}
