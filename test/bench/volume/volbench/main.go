// Command volbench times the loop volume backend on real loop devices:
// create+attach+mount of a volume, grow by 2 GiB (online when the process
// may), trim of deleted data, and shrink by 1 GiB with data on it. It is
// run by test/bench/volume/run, which removes what it made.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"corpus/volume"
	"corpus/volume/loop"
)

func main() {
	root := flag.String("root", "", "scratch folder for the images (required)")
	size := flag.Int64("size", 5*volume.GiB, "volume size")
	data := flag.Int64("data", volume.GiB, "bytes written before the grow and deleted before the trim")
	small := flag.Int64("small", 100*volume.MiB, "bytes on the volume while it shrinks")
	flag.Parse()
	if err := run(*root, *size, *data, *small); err != nil {
		fmt.Fprintln(os.Stderr, "volbench:", err)
		os.Exit(1)
	}
}

func run(root string, size, data, small int64) error {
	if root == "" {
		return errors.New("-root is required")
	}
	ctx := context.Background()
	b, err := loop.New(loop.Config{Root: root, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	const name = "bench"
	mnt := filepath.Join(root, "mnt")
	defer b.Delete(ctx, name, true)

	t := time.Now()
	if err := b.Create(ctx, name, size); err != nil {
		return err
	}
	tCreate := time.Since(t)
	t2 := time.Now()
	dev, err := b.Attach(ctx, name)
	if err != nil {
		return err
	}
	tAttach := time.Since(t2)
	t2 = time.Now()
	if err := b.Mount(ctx, name, mnt); err != nil {
		return err
	}
	tMount := time.Since(t2)
	report("create+attach+mount "+gib(size), time.Since(t),
		fmt.Sprintf("create %s, attach %s (%s), mount %s", ms(tCreate), ms(tAttach), dev, ms(tMount)))

	t = time.Now()
	if _, err := write(filepath.Join(mnt, "bulk"), data, 1); err != nil {
		return err
	}
	report("write "+gib(data)+" of data (sync)", time.Since(t), "")

	newSize := size + 2*volume.GiB
	if b.Capabilities().GrowOnline {
		t = time.Now()
		if err := b.Grow(ctx, name, newSize); err != nil {
			return err
		}
		report(fmt.Sprintf("grow online %s -> %s with %s data", gib(size), gib(newSize), gib(data)), time.Since(t), "df inside: "+df(mnt))
	} else {
		t = time.Now()
		if err := b.Unmount(ctx, name); err != nil {
			return err
		}
		t2 := time.Now()
		if err := b.Grow(ctx, name, newSize); err != nil {
			return err
		}
		tGrow := time.Since(t2)
		if err := b.Mount(ctx, name, mnt); err != nil {
			return err
		}
		report(fmt.Sprintf("grow OFFLINE %s -> %s with %s data", gib(size), gib(newSize), gib(data)), time.Since(t),
			fmt.Sprintf("no CAP_SYS_RESOURCE here, so unmount+grow+mount; e2fsck+resize2fs alone %s; df: %s", ms(tGrow), df(mnt)))
	}

	before, _ := b.Stat(ctx, name)
	if err := os.Remove(filepath.Join(mnt, "bulk")); err != nil {
		return err
	}
	syscall.Sync()
	t = time.Now()
	trimmed, err := b.Trim(ctx, name)
	if err != nil {
		return err
	}
	d := time.Since(t)
	after, _ := b.Stat(ctx, name)
	report("trim after deleting "+gib(data), d, fmt.Sprintf("fs trimmed %s; image allocated %s -> %s", gib(trimmed), gib(before.Allocated), gib(after.Allocated)))

	sum, err := write(filepath.Join(mnt, "small"), small, 2)
	if err != nil {
		return err
	}
	t = time.Now()
	if err := b.Unmount(ctx, name); err != nil {
		return err
	}
	t2 = time.Now()
	if err := b.Shrink(ctx, name, newSize-volume.GiB, true); err != nil {
		return err
	}
	tShrink := time.Since(t2)
	if err := b.Mount(ctx, name, mnt); err != nil {
		return err
	}
	total := time.Since(t)
	got, err := hash(filepath.Join(mnt, "small"))
	if err != nil {
		return err
	}
	if got != sum {
		return errors.New("data changed by shrink")
	}
	report(fmt.Sprintf("shrink %s -> %s with %s data", gib(newSize), gib(newSize-volume.GiB), gib(small)), total,
		fmt.Sprintf("unmount+shrink+mount; e2fsck+resize2fs+truncate alone %s; data checksum intact", ms(tShrink)))

	t = time.Now()
	if err := b.Delete(ctx, name, true); err != nil {
		return err
	}
	report("delete (unmount+detach+remove)", time.Since(t), "")
	return nil
}

func report(what string, d time.Duration, note string) {
	if note != "" {
		note = "  (" + note + ")"
	}
	fmt.Printf("%-48s %8s%s\n", what, ms(d), note)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func gib(n int64) string {
	if n%volume.GiB == 0 {
		return fmt.Sprintf("%d GiB", n/volume.GiB)
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/float64(volume.MiB))
}

func df(path string) string {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("size %s, free %s", gib(int64(fs.Blocks)*fs.Bsize), gib(int64(fs.Bavail)*fs.Bsize))
}

func write(path string, n int64, seed byte) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Create(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8([32]byte{seed}), n); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, f.Sync()
}

func hash(path string) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
