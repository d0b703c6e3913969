package dns

import "testing"

// TestCacheSizedToUse: an empty cache costs little, whatever its cap; it
// grows with the answers it keeps (an agent's resolver with a cap of
// 4096 held 640 KB before any query).
func TestCacheSizedToUse(t *testing.T) {
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = newCache(4096)
		}
	})
	if got := res.AllocedBytesPerOp(); got > 4<<10 {
		t.Errorf("newCache(4096) allocates %d bytes, want at most 4 KiB before any answer is kept", got)
	}
}
