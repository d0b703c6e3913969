package load

import (
	"os"
	"testing"
	"time"
)

// TestCPUOfThisProcess: the cgroup of this test counts the CPU it burns.
func TestCPUOfThisProcess(t *testing.T) {
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Skipf("no readable cpu cgroup here: %v", err)
	}
	end := time.Now().Add(200 * time.Millisecond)
	for n := 0; time.Now().Before(end); n++ {
		_ = n * n
	}
	after, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 0.1 {
		t.Errorf("CPU went from %.3fs to %.3fs over 200ms of spinning", before, after)
	}
}

func TestCPUErrors(t *testing.T) {
	if _, err := CPU(0); err == nil {
		t.Error("CPU(0) succeeded")
	}
	if _, err := CPU(1 << 30); err == nil {
		t.Error("CPU of a process that does not exist succeeded")
	}
}
