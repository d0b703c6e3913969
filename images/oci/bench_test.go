//go:build linux

package oci_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"corpus/images/oci"
	"corpus/images/oci/ocitest"
)

// TestBenchPullUnpack (test/bench/oci/run; CORPUS_BENCH_OCI=1): the
// time to pull an image of CORPUS_BENCH_OCI_MIB (200) MiB from a
// registry on loopback into an empty store and unpack it, against
// skopeo copy into an OCI layout then umoci unpack of it (Debian's
// packages), the same image from the same registry, in rounds
// (CORPUS_BENCH_OCI_ROUNDS, 5) that alternate which goes first; each
// round starts from empty folders on a tmpfs. It prints RESULT lines:
// the medians and their ratio.
func TestBenchPullUnpack(t *testing.T) {
	if os.Getenv("CORPUS_BENCH_OCI") != "1" {
		t.Skip("a benchmark: CORPUS_BENCH_OCI=1 (test/bench/oci/run)")
	}
	for _, tool := range []string{"skopeo", "umoci"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (apt-get install skopeo umoci): %v", tool, err)
		}
	}
	mib := envInt(t, "CORPUS_BENCH_OCI_MIB", 200)
	rounds := envInt(t, "CORPUS_BENCH_OCI_ROUNDS", 5)
	reg := ocitest.Registry(t)
	ref := reg + "/bench/app:1"
	layers, files := benchLayers(t, mib)
	ocitest.Push(t, ref, ocitest.Image(t, v1.Config{Cmd: []string{"/bin/app"}}, layers...))
	t.Logf("image %s: %d layers, %d files, %d MiB unpacked", ref, len(layers), files, mib)

	// The rounds write to a tmpfs: on this machine's disk (ext4 mounted
	// with discard) each round's writes waited on the trims of the
	// last one's deletes, 3 s for the first round and 20 to 25 s for
	// the next, for either tool; what is compared is the tools' work.
	work := t.TempDir()
	if err := syscall.Mount("corpus-bench", work, "tmpfs", 0, "size=4g,mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs for the rounds: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(work, syscall.MNT_DETACH) })
	corpus := func(dir string) error {
		s := &oci.Store{Root: filepath.Join(dir, "store")}
		img, err := s.Pull(context.Background(), ref, nil)
		if err != nil {
			return err
		}
		return s.Unpack(context.Background(), img, filepath.Join(dir, "rootfs"))
	}
	peer := func(dir string) error {
		layout := filepath.Join(dir, "layout")
		if out, err := exec.Command("skopeo", "copy", "--quiet", "--src-tls-verify=false",
			"docker://"+ref, "oci:"+layout+":1").CombinedOutput(); err != nil {
			return fmt.Errorf("skopeo copy: %v: %s", err, out)
		}
		if out, err := exec.Command("umoci", "unpack", "--image", layout+":1", filepath.Join(dir, "bundle")).CombinedOutput(); err != nil {
			return fmt.Errorf("umoci unpack: %v: %s", err, out)
		}
		return nil
	}
	var ours, theirs []time.Duration
	timed := func(name string, f func(string) error, into *[]time.Duration, round int) {
		dir := filepath.Join(work, fmt.Sprintf("%s-%d", name, round))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := f(dir); err != nil {
			t.Fatalf("%s, round %d: %v", name, round, err)
		}
		*into = append(*into, time.Since(start))
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	for r := range rounds {
		if r%2 == 0 {
			timed("corpus", corpus, &ours, r)
			timed("skopeo", peer, &theirs, r)
		} else {
			timed("skopeo", peer, &theirs, r)
			timed("corpus", corpus, &ours, r)
		}
		t.Logf("round %d: corpus %v, skopeo+umoci %v", r+1, ours[r].Round(time.Millisecond), theirs[r].Round(time.Millisecond))
	}
	o, p := median(ours), median(theirs)
	fmt.Printf("RESULT pull_unpack_ms=%d\n", o.Milliseconds())
	fmt.Printf("RESULT skopeo_umoci_ms=%d\n", p.Milliseconds())
	fmt.Printf("RESULT pull_unpack_ratio=%.2f\n", float64(o)/float64(p))
	fmt.Printf("RESULT image_mib=%d rounds=%d\n", mib, rounds)
}

// benchLayers is an image of about mib MiB unpacked, shaped as
// application images are: a layer of many small files (a distribution's
// tree), one of a few large incompressible ones (binaries, assets), one
// of medium files, and a top layer that deletes and replaces some of
// the first's (whiteouts).
func benchLayers(t *testing.T, mib int) ([]v1.Layer, int) {
	rng := rand.New(rand.NewPCG(1, uint64(mib)))
	text := func(n int) string {
		words := []string{"corpus", "guest", "layer", "image", "node", "agent", "route", "release", "\n", "config"}
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		return b.String()[:n]
	}
	random := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	unit := mib << 20 / 5 // a fifth of the image
	var small, medium, large, top []ocitest.File
	small = append(small, ocitest.File{Name: "usr/"}, ocitest.File{Name: "usr/share/"})
	for i := 0; i < unit*2/(4<<10); i++ { // 2/5 in 4 KiB text files
		dir := fmt.Sprintf("usr/share/d%03d/", i/100)
		if i%100 == 0 {
			small = append(small, ocitest.File{Name: dir})
		}
		small = append(small, ocitest.File{Name: dir + "f" + strconv.Itoa(i), Body: text(4 << 10)})
	}
	large = append(large, ocitest.File{Name: "bin/"})
	for i := range 4 { // 1/5 in four incompressible files
		large = append(large, ocitest.File{Name: fmt.Sprintf("bin/app%d", i), Body: random(unit / 4), Mode: 0o755})
	}
	medium = append(medium, ocitest.File{Name: "srv/"})
	for i := 0; i < unit/(64<<10); i++ { // 1/5 in 64 KiB files, half text
		body := text(32<<10) + random(32<<10)
		medium = append(medium, ocitest.File{Name: fmt.Sprintf("srv/m%d", i), Body: body})
	}
	top = append(top, ocitest.File{Name: "usr/"}, ocitest.File{Name: "usr/share/"}, ocitest.File{Name: "usr/share/d000/"})
	for i := range 50 {
		top = append(top, ocitest.File{Name: fmt.Sprintf("usr/share/d000/.wh.f%d", i)})
	}
	top = append(top, ocitest.File{Name: "opt/"})
	for i := 0; i < unit/(256<<10); i++ { // 1/5 in 256 KiB mixed files
		top = append(top, ocitest.File{Name: fmt.Sprintf("opt/o%d", i), Body: text(128<<10) + random(128<<10)})
	}
	n := 0
	var layers []v1.Layer
	for _, files := range [][]ocitest.File{small, large, medium, top} {
		n += len(files)
		layers = append(layers, ocitest.Layer(t, files...))
	}
	return layers, n
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
