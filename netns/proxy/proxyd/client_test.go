package proxyd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
	"corpus/netns/listen"
)

// helperEnv makes this test binary a stand-in for `corpus proxy` (the
// command lives in cmd/corpus/daemon, which this package cannot import):
// the same flags, the same Run.
const helperEnv = "CORPUS_PROXYD_TEST_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(proxyProcess(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// proxyProcess runs `proxy --dir DIR --http-addr A ...` as corpus proxy
// does, with the Client's arguments.
func proxyProcess(args []string) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var cfg Config
	fs.StringVar(&cfg.Dir, "dir", "", "")
	fs.StringVar(&cfg.Proxy.HTTPAddr, "http-addr", "", "")
	fs.StringVar(&cfg.Proxy.HTTPSAddr, "https-addr", "", "")
	fs.BoolVar(&cfg.Takeover, "takeover", false, "")
	fs.Bool("release-mounts", false, "")
	fd := fs.Int("report-fd", 0, "")
	if len(args) == 0 || args[0] != "proxy" || fs.Parse(args[1:]) != nil {
		fmt.Fprintf(os.Stderr, "proxy stand-in: bad arguments %q\n", args)
		return 2
	}
	if *fd > 2 {
		cfg.Report = os.NewFile(uintptr(*fd), "report")
	}
	cfg.Version = "test"
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	return 0
}

// TestClientSaysWhoHoldsThePort: a proxy process that cannot listen on
// its HTTP address, held by another program, ends at once, and the
// client returns its *listen.Error naming that program, not "ended
// at start; see proxy.log".
func TestClientSaysWhoHoldsThePort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the proxy process runs in a mount namespace of its own")
	}
	t.Setenv(helperEnv, "1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "600") // holds the socket, alone
	holder.ExtraFiles = []*os.File{f}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	f.Close()
	ln.Close()

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(time.Minute))
	defer cancel()
	start := time.Now()
	c, err := NewClient(ctx, ClientConfig{Dir: dir, Binary: os.Args[0], Args: []string{"proxy", "--dir", dir, "--http-addr", addr},
		Version: "test", HTTPAddr: addr})
	took := time.Since(start)
	if err == nil {
		c.Stop()
		t.Fatalf("NewClient with %s held by sleep = a client, want an error", addr)
	}
	var le *listen.Error
	if !errors.As(err, &le) || !errors.Is(err, syscall.EADDRINUSE) || le.Listener != "http" || le.Addr != addr {
		t.Fatalf("NewClient with %s held by sleep = %v, want the proxy process's listen.Error", addr, err)
	}
	if le.Holder == nil || le.Holder.Name != "sleep" || le.Holder.PID != holder.Process.Pid {
		t.Errorf("the error names holder %v, want sleep (pid %d)", le.Holder, holder.Process.Pid)
	}
	if took > testrun.D(10*time.Second) {
		t.Errorf("NewClient took %s to say so", took)
	}
	t.Logf("NewClient = %v after %s", err, took.Round(time.Millisecond))
}
