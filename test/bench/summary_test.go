// Package bench holds the tests of the benchmark scripts' shared parts:
// the rows each script writes and the summary table made from them.
package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryTable: rows written by rows.bash, as the bench scripts write
// them, become one Markdown table with the peer, the ratio, the machine
// and the date, printed and written to the summary file.
func TestSummaryTable(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	dir := t.TempDir()
	rows := filepath.Join(dir, "rows")
	produce := exec.Command("bash", "-c", `set -euo pipefail
source test/bench/rows.bash
row dns "queries/s" 41000 qps higher bind9 52000
row dns "mean latency" 0.48 ms lower bind9 0.40
rows_write dns
bench_rows=()
row guest "agent RSS idle" 30512 KiB lower
row guest "create to running, cold | image" 812 ms lower "raw LXC" "$(dur_ms 1.5s)"
rows_write guest`)
	produce.Dir = filepath.Join("..", "..")
	produce.Env = append(os.Environ(), "BENCH_ROWS_DIR="+rows)
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("writing rows: %v\n%s", err, out)
	}

	out := filepath.Join(dir, "summary.md")
	summary := exec.Command("./summary")
	summary.Env = append(os.Environ(), "BENCH_ROWS_DIR="+rows, "SUMMARY_OUT="+out)
	printed, err := summary.Output()
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(printed), string(written)) {
		t.Errorf("summary printed:\n%s\nbut wrote:\n%s", printed, written)
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	for _, want := range []string{
		"| benchmark | figure | corpus | peer | peer figure | ratio | better |",
		// guest comes before dns, as make bench runs them.
		"| guest | agent RSS idle | 30512 KiB | – | – | – | lower |\n| guest | create to running, cold \\| image | 812 ms | raw LXC | 1500 ms | 0.54× | lower |\n| dns | queries/s | 41000 qps | bind9 | 52000 qps | 0.79× | higher |",
		"| dns | mean latency | 0.48 ms | bind9 | 0.40 ms | 1.20× | lower |",
		"Linux " + strings.TrimSpace(string(kernel)),
		"Measured: guest 20",
	} {
		if !strings.Contains(string(written), want) {
			t.Errorf("summary:\n%s\nwant it to contain %q", written, want)
		}
	}

	empty := exec.Command("./summary")
	empty.Env = append(os.Environ(), "BENCH_ROWS_DIR="+t.TempDir(), "SUMMARY_OUT="+filepath.Join(dir, "none.md"))
	if msg, err := empty.CombinedOutput(); err == nil || !strings.Contains(string(msg), "no rows") {
		t.Errorf("summary with no rows = %v, %q; want a failure saying there are no rows", err, msg)
	}
}
