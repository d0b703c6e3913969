package loop

import (
	"encoding/binary"
	"testing"
)

func TestParseSuperblock(t *testing.T) {
	t.Parallel()
	buf := make([]byte, sbSize)
	le := binary.LittleEndian
	le.PutUint16(buf[0x38:], ext4Magic)
	le.PutUint32(buf[0x18:], 2) // 4 KiB blocks
	le.PutUint32(buf[0x04:], 1000)
	le.PutUint32(buf[0x0C:], 400)
	le.PutUint32(buf[0x60:], incompat64bit)
	le.PutUint32(buf[0x150:], 1)
	copy(buf[0x78:], "data")
	sb, err := parseSuperblock(buf)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1<<32+1000) * 4096; sb.size() != want {
		t.Errorf("size = %d, want %d", sb.size(), want)
	}
	if sb.free() != 400*4096 || sb.label != "data" {
		t.Errorf("free, label = %d, %q, want %d, data", sb.free(), sb.label, 400*4096)
	}
	buf[0x38] = 0
	if _, err := parseSuperblock(buf); err == nil {
		t.Errorf("parseSuperblock without magic = nil error, want one")
	}
}
