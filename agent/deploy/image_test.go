package deploy

import (
	"os"
	"path/filepath"
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
