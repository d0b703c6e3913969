package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// TestBenchOCIStart measures a guest's start from an OCI image the node
// has cached (test/bench/oci/run runs it; skipped unless
// CORPUS_BENCH_OCI_START is set, being a measurement, not a check):
// `corpus guest create --image REF` (the CLI process, which waits until
// the guest runs) against raw LXC starting a container on the same
// unpacked root file system (lxc-copy of the image's cache container as
// an overlay snapshot, its command as init, a veth on a bridge, then
// lxc-start, which returns once the container runs), medians of CORPUS_BENCH_OCI_RUNS (5) each. The first
// guest's create (pull, unpack, start) is logged as the cold figure.
func TestBenchOCIStart(t *testing.T) {
	if os.Getenv("CORPUS_BENCH_OCI_START") == "" {
		t.Skip("a measurement: set CORPUS_BENCH_OCI_START=1 (test/bench/oci/run does)")
	}
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("CORPUS_BENCH_OCI_RUNS")); err == nil && v > 0 {
		runs = v
	}
	c := newCluster(t)
	a := c.addAgent("n1")
	reg, tr := registryIn(t, a.node.ns)
	const cmd = "exec httpd -f -p 8080 -h /"
	ref := reg + "/bench/web:1"
	ocitest.Push(t, ref, ocitest.Image(t, v1.Config{Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{cmd}, Env: []string{"PATH=/bin"}},
		ocitest.BusyboxLayer(t)), remote.WithTransport(tr))

	create := func(name string) time.Duration {
		t.Helper()
		start := time.Now()
		c.mustCLI("guest", "create", name, "--image", ref, "--memory", "32M", "--cpus", "0.05")
		return time.Since(start)
	}
	cold := create("g0")
	var warm []time.Duration
	for i := 1; i <= runs; i++ {
		warm = append(warm, create(fmt.Sprintf("g%d", i)))
	}

	// The image's cache container, which the guests stack on.
	caches, _ := filepath.Glob(filepath.Join(a.stateDir, "lxc", ".images", "oci-*", "rootfs"))
	if len(caches) != 1 {
		t.Fatalf("image caches: %v; want one", caches)
	}
	cache := filepath.Dir(caches[0])
	raw := filepath.Join(tempDir(t), "raw")
	if err := os.MkdirAll(raw, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 1; i <= runs; i++ {
			n := fmt.Sprintf("r%d", i)
			exec.Command(enterNodeNS, a.node.ns, "lxc-stop", "-P", raw, "-n", n, "-k").Run()
			exec.Command("lxc-destroy", "-P", raw, "-n", n, "-f").Run()
		}
		exec.Command("ip", "-n", a.node.ns, "link", "del", "cbraw").Run()
	})
	// One shell in the node's namespace runs the whole raw sequence, so
	// no namespace entry is timed.
	script := `
set -e
cache=$1 raw=$2 runs=$3 init=$4
ip link add cbraw type bridge && ip addr add 10.212.0.1/24 dev cbraw && ip link set cbraw up
now() { date +%s%N; }
for i in $(seq 1 "$runs"); do
  t0=$(now)
  lxc-copy -P "$(dirname "$cache")" -n "$(basename "$cache")" -p "$raw" -N "r$i" -s -B overlayfs >/dev/null
  sed -i '/^lxc.net\./d; /^lxc.init.cmd/d; /^lxc.idmap/d' "$raw/r$i/config"
  printf 'lxc.net.0.type = veth\nlxc.net.0.link = cbraw\nlxc.net.0.flags = up\nlxc.net.0.ipv4.address = 10.212.0.%d/24\nlxc.init.cmd = %s\n' $((10 + i)) "$init" >> "$raw/r$i/config"
  lxc-start -P "$raw" -n "r$i" --logfile "$raw/r$i.log" --logpriority INFO || { tail -20 "$raw/r$i.log"; cat "$raw/r$i/config"; exit 1; }
  t1=$(now)
  echo "raw $(( (t1 - t0) / 1000000 ))"
done`
	// lxc.init.cmd is split at spaces (no shell quoting): the image's
	// command without its shell, which only execs it.
	out, err := exec.Command(enterNodeNS, a.node.ns, "bash", "-c", script+`
for i in $(seq 1 "$runs"); do [ "$(lxc-info -P "$raw" -n "r$i" -sH)" = RUNNING ] || { echo "r$i is not running"; tail -5 "$raw/r$i.log"; exit 1; }; done`,
		"bash", cache, raw, strconv.Itoa(runs), "/bin/busybox httpd -f -p 8080 -h /").CombinedOutput()
	if err != nil {
		cfg, _ := os.ReadFile(filepath.Join(cache, "config"))
		guest, _ := os.ReadFile(filepath.Join(a.stateDir, "lxc", "g1", "config"))
		t.Fatalf("raw LXC: %v\n%s\nthe cache container's config:\n%s\na guest's:\n%s", err, out, cfg, guest)
	}
	var rawMs []float64
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "raw "); ok {
			ms, _ := strconv.ParseFloat(v, 64)
			rawMs = append(rawMs, ms)
		}
	}
	if len(rawMs) != runs {
		t.Fatalf("raw LXC gave %d figures, want %d:\n%s", len(rawMs), runs, out)
	}
	warmMs := make([]float64, len(warm))
	for i, d := range warm {
		warmMs[i] = float64(d.Milliseconds())
	}
	t.Logf("guest from a cached OCI image: corpus %v, raw LXC %v ms (cold, with pull and unpack: %s)", warm, rawMs, cold.Round(time.Millisecond))
	t.Logf("RESULT oci_start_ms=%.0f raw_lxc_ms=%.0f cold_ms=%d runs=%d", medianOf(warmMs), medianOf(rawMs), cold.Milliseconds(), runs)
}

// medianOf is the median of vs.
func medianOf(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
