package daemon

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"corpus/cmd/corpus/cli"
	"corpus/internal/metrics/metricstest"
	"corpus/internal/testrun"
)

// TestDevBannerNamesTheTokenFile: `corpus dev` says where the operator
// token is, not the token (what it prints often goes to a log).
func TestDevBannerNamesTheTokenFile(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	devBanner{API: "127.0.0.1:7400", Metrics: "http://127.0.0.1:9464/metrics", OpsTokenFile: "/var/lib/corpus/dev/coordinator/ops-token", Env: "dev"}.write(&out)
	for _, want := range []string{"operator token    in /var/lib/corpus/dev/coordinator/ops-token (", "https://127.0.0.1:7400", "metrics           http://127.0.0.1:9464/metrics"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("corpus dev printed:\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}

// TestDevServesOneRegistry: corpus dev serves the coordinator's and the
// agent's metrics from one registry at the address its banner prints,
// and what it serves passes promtool.
func TestDevServesOneRegistry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out syncBuffer
	g := cli.NewGlobals(io.Discard, &out)
	root := cli.NewRoot(g, Commands)
	root.SetArgs([]string{"dev", "--config-file", filepath.Join(dir, "cli.yaml"), "--state-dir", filepath.Join(dir, "state"),
		"--api-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--agent-addr", "127.0.0.1:0", "--dns-addr", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0", "--network=false", "--git-addr", "", "--log-format", "json", "--log-level", "warn"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("corpus dev = %v, want nil after a stop", err)
		}
	}()
	re := regexp.MustCompile(`metrics +(http://\S+/metrics)`)
	var url string
	for deadline := time.Now().Add(testrun.D(60 * time.Second)); url == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("corpus dev stopped: %v\n%s", err, out.String())
		default:
		}
	}
	if url == "" {
		t.Fatalf("corpus dev printed no metrics URL:\n%s", out.String())
	}
	// The agent enrolls after the banner; its node certificate shows
	// once it has.
	wants := []string{
		"corpus_raft_leader 1", `corpus_guests{driver="lxc",state="running"} 0`,
		`corpus_certificate_expiry_seconds{certificate="replica",component="coordinator"}`,
		`corpus_certificate_expiry_seconds{certificate="node",component="agent"}`,
	}
	var body []byte
	var missing []string
	for deadline := time.Now().Add(testrun.D(30 * time.Second)); ; time.Sleep(100 * time.Millisecond) {
		body, missing = metricstest.Scrape(t, url), nil
		for _, want := range wants {
			if !strings.Contains(string(body), want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range missing {
		t.Errorf("corpus dev's metrics lack %q", want)
	}
	metricstest.Promtool(t, body)

	// What it prints goes to logs: the operator token is not in it.
	tok, err := os.ReadFile(filepath.Join(dir, "state", "coordinator", "ops-token"))
	if err != nil || len(strings.TrimSpace(string(tok))) < 16 {
		t.Fatalf("ops-token: %q, %v", tok, err)
	}
	if strings.Contains(out.String(), strings.TrimSpace(string(tok))) {
		t.Errorf("corpus dev printed the operator token:\n%s", out.String())
	}
}
