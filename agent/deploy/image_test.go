package deploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

// TestPortHint: a web of an image that did not answer on $PORT is told
// what the image exposes and why $PORT; other errors, and images that
// expose nothing, are left as they are.
func TestPortHint(t *testing.T) {
	noAnswer := fmt.Errorf("GET http://10.0.0.2:5001/: connection refused (%w within 30s)", errNoAnswer)
	got := portHint(noAnswer, []string{"80/tcp"})
	if !errors.Is(got, errNoAnswer) || !strings.Contains(got.Error(), "the image exposes 80/tcp") || !strings.Contains(got.Error(), "$PORT") {
		t.Errorf("portHint(no answer, 80/tcp) = %v", got)
	}
	if got := portHint(noAnswer, nil); got != noAnswer {
		t.Errorf("portHint(no answer, nothing exposed) = %v, want the error as it was", got)
	}
	other := errors.New("process web exited within 1s of its start")
	if got := portHint(other, []string{"80/tcp"}); got != other {
		t.Errorf("portHint(another error) = %v, want it as it was", got)
	}
	if got := portHint(nil, []string{"80/tcp"}); got != nil {
		t.Errorf("portHint(nil) = %v", got)
	}
}
