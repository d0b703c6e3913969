// Package bench holds the tests of the benchmark scripts' shared parts:
// the rows each script writes and the summary table made from them.
package bench

import (
	"errors"
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

// TestChanges: each row of a new run beside the same row of the last
// table, compared by ratio where both have a peer and by figure
// otherwise; a row worse by more than a quarter is marked and fails the
// comparison; the base may be rows or the table summary wrote.
func TestChanges(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	dir := t.TempDir()
	write := func(name, rows string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		cmd := exec.Command("bash", "-c", "set -euo pipefail\nsource test/bench/rows.bash\n"+rows)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "BENCH_ROWS_DIR="+out)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("writing rows: %v\n%s", err, msg)
		}
		return out
	}
	base := write("base", `row dns "queries/s" 41000 qps higher bind9 52000
row dns "mean latency" 0.48 ms lower bind9 0.40
row guest "agent RSS idle" 30000 KiB lower
rows_write dns`)
	// queries/s: the peer slowed down as much (same ratio: unchanged);
	// latency: ratio 1.20 -> 1.60 (1.33x, worse); RSS 30000 -> 33000
	// (1.10x, not a quarter); a row the base lacks.
	now := write("now", `row dns "queries/s" 20500 qps higher bind9 26000
row dns "mean latency" 0.64 ms lower bind9 0.40
row guest "agent RSS idle" 33000 KiB lower
row guest "agent RSS | 100 guests" 50000 KiB lower
rows_write dns`)

	changes := func(base string) (string, error) {
		out, err := exec.Command("./changes", base, now, "a test").Output()
		return string(out), err
	}
	out, err := changes(base)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("changes with a row worse by a third = %v, want exit status 3", err)
	}
	for _, want := range []string{
		"# a test",
		"| dns | queries/s vs bind9 | 41000 qps (0.79×) | 20500 qps (0.79×) | 1.00× |",
		"| dns | mean latency vs bind9 | 0.48 ms (1.20×) | 0.64 ms (1.60×) | 1.33× **WORSE** |",
		"| guest | agent RSS idle | 30000 KiB | 33000 KiB | 1.10× |",
		"| guest | agent RSS \\| 100 guests | – | 50000 KiB | new |",
		"4 rows, 1 worse by more than a quarter.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("changes printed:\n%s\nwant it to contain %q", out, want)
		}
	}

	// The base as the table make bench commits: the same rows back.
	table := filepath.Join(dir, "summary.md")
	summary := exec.Command("./summary")
	summary.Env = append(os.Environ(), "BENCH_ROWS_DIR="+base, "SUMMARY_OUT="+table)
	if msg, err := summary.CombinedOutput(); err != nil {
		t.Fatalf("summary: %v\n%s", err, msg)
	}
	fromTable, err := changes(table)
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("changes against the table = %v, want exit status 3", err)
	}
	if fromTable != out {
		t.Errorf("changes against the table printed:\n%s\nagainst its rows:\n%s", fromTable, out)
	}
}
