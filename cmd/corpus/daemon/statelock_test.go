package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"corpus/cmd/corpus/cli"
	"corpus/coordinator"
	"corpus/internal/testrun"
)

// asCorpusEnv makes the test binary run as the corpus command (see
// TestMain), so a test can start daemons as real processes.
const asCorpusEnv = "CORPUS_CLI_TEST_AS_CORPUS"

func TestMain(m *testing.M) {
	if os.Getenv(asCorpusEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:], Commands))
	}
	os.Exit(m.Run())
}

// corpusCmd is the test binary run as `corpus args...`.
func corpusCmd(ctx context.Context, t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asCorpusEnv+"=1", "XDG_CONFIG_HOME="+t.TempDir(), "CORPUS_ENV=")
	return cmd
}

// TestSecondDaemonOnAFolderIsRefused: with a coordinator running on its
// data folder, a second coordinator, an agent or a `corpus dev` given
// that folder exits at once with an error naming the folder and the PID
// of the process holding it, instead of waiting on the locked database.
func TestSecondDaemonOnAFolderIsRefused(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	dir := filepath.Join(top, "coordinator")
	ports := []string{"--api-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--dns-addr", "", "--gossip-addr", "", "--metrics-addr", ""}

	ctx, cancel := context.WithCancel(context.Background())
	first := corpusCmd(ctx, t, append([]string{"coordinator", "--data-dir", dir}, ports...)...)
	var log syncBuffer
	first.Stdout, first.Stderr = &log, &log
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { first.Wait(); close(done) }()
	t.Cleanup(func() {
		first.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(testrun.D(20 * time.Second)):
			cancel() // kills it
			<-done
		}
		cancel()
	})
	// Serving means it holds the lock and has opened its databases.
	deadline := time.Now().Add(testrun.D(30 * time.Second))
	for !strings.Contains(log.String(), "coordinator listening") {
		select {
		case <-done:
			t.Fatalf("first coordinator exited:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("first coordinator not serving after 30s:\n%s", log.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, coordinator.OpsTokenFile)); err != nil {
		t.Fatalf("first coordinator serves without its ops token: %v", err)
	}

	holder := fmt.Sprintf("state folder %s is in use by process %d", dir, first.Process.Pid)
	for _, args := range [][]string{
		append([]string{"coordinator", "--data-dir", dir}, ports...),
		{"agent", "--state-dir", dir, "--api-addr", "127.0.0.1:0", "--gossip-addr", "", "--coordinator", "127.0.0.1:1"},
		{"dev", "--state-dir", top, "--api-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--agent-addr", "127.0.0.1:0", "--dns-addr", "", "--network=false"},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testrun.D(20*time.Second))
			defer cancel()
			second := corpusCmd(ctx, t, args...)
			var out bytes.Buffer
			second.Stdout, second.Stderr = &out, &out
			start := time.Now()
			err := second.Run()
			took := time.Since(start)
			if ctx.Err() != nil {
				t.Fatalf("corpus %s on a folder in use still ran after 20s:\n%s", args[0], out.String())
			}
			if code := second.ProcessState.ExitCode(); code == 0 || err == nil {
				t.Errorf("corpus %s on a folder in use exited %d, want non-zero", args[0], code)
			}
			if !strings.Contains(out.String(), holder) {
				t.Errorf("corpus %s said:\n%s\nwant it to contain %q", args[0], out.String(), holder)
			}
			if took > testrun.D(5*time.Second) {
				t.Errorf("corpus %s took %v to refuse, want at once", args[0], took)
			}
		})
	}
	// The first is untouched by the refusals.
	if err := first.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("first coordinator gone after the refusals: %v\n%s", err, log.String())
	}
}

// syncBuffer is a bytes.Buffer a process writes to while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
