package deploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/agent/deploy/webcheck"
)

// TestNewRemovesUnpackedImages: an image a deploy cut short left
// unpacked (the agent killed mid-deploy) is gone when the pipeline
// starts again.
func TestNewRemovesUnpackedImages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "unpack")
	left := filepath.Join(dir, "unpack-1", imageRoot, "bin")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{ImageDir: dir, Metrics: prometheus.NewRegistry()}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "unpack-1")); !os.IsNotExist(err) {
		t.Errorf("after New, the leftover unpacked image: %v, want it gone", err)
	}
}

// TestPortHint: a web of an image that gave no answer is told where it
// was asked and why: on its exposed port in a network of its own, or on
// $PORT for an image that exposes no TCP port; other errors are left as
// they are.
func TestPortHint(t *testing.T) {
	noAnswer := fmt.Errorf("GET http://10.0.0.2:5001/: connection refused (%w within 30s)", webcheck.ErrNoAnswer)
	for _, c := range []struct {
		web     int
		exposed []string
		want    []string
	}{
		{80, []string{"80/tcp", "443/tcp"}, []string{"exposes 80/tcp, 443/tcp", "asked on 80 (PORT=80 there)", "network of its own"}},
		{0, []string{"53/udp"}, []string{"no TCP port (only 53/udp)", "$PORT"}},
		{0, nil, []string{"exposes no port", "$PORT", "EXPOSE"}},
	} {
		got := portHint(noAnswer, c.web, c.exposed)
		if !errors.Is(got, webcheck.ErrNoAnswer) {
			t.Errorf("portHint(no answer, %d, %v) = %v, not webcheck.ErrNoAnswer", c.web, c.exposed, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("portHint(no answer, %d, %v) = %v; want %q in it", c.web, c.exposed, got, w)
			}
		}
	}
	other := errors.New("process web exited within 1s of its start")
	if got := portHint(other, 80, []string{"80/tcp"}); got != other {
		t.Errorf("portHint(another error) = %v, want it as it was", got)
	}
	if got := portHint(nil, 80, []string{"80/tcp"}); got != nil {
		t.Errorf("portHint(nil) = %v", got)
	}
}
