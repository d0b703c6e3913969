package loop

import (
	"encoding/binary"
	"fmt"
	"io"
)

// superblock holds the ext4 superblock fields the backend reads.
type superblock struct {
	blockSize  int64
	blocks     int64
	freeBlocks int64
	label      string
}

const (
	sbOffset      = 1024
	sbSize        = 1024
	ext4Magic     = 0xEF53
	incompat64bit = 0x80
)

// readSuperblock reads the ext4 superblock at the start of r (an image
// file or a block device). Free blocks are as last written to disk; a
// mounted file system keeps its counts in memory (use statfs there).
func readSuperblock(r io.ReaderAt) (superblock, error) {
	buf := make([]byte, sbSize)
	if _, err := r.ReadAt(buf, sbOffset); err != nil {
		return superblock{}, fmt.Errorf("reading ext4 superblock: %w", err)
	}
	return parseSuperblock(buf)
}

func parseSuperblock(buf []byte) (superblock, error) {
	le := binary.LittleEndian
	if len(buf) < sbSize || le.Uint16(buf[0x38:]) != ext4Magic {
		return superblock{}, fmt.Errorf("reading ext4 superblock: no ext4 magic")
	}
	logBlock := le.Uint32(buf[0x18:])
	if logBlock > 6 {
		return superblock{}, fmt.Errorf("reading ext4 superblock: block size 2^%d KiB is out of range", logBlock)
	}
	sb := superblock{
		blockSize:  1024 << logBlock,
		blocks:     int64(le.Uint32(buf[0x04:])),
		freeBlocks: int64(le.Uint32(buf[0x0C:])),
	}
	if le.Uint32(buf[0x60:])&incompat64bit != 0 {
		sb.blocks |= int64(le.Uint32(buf[0x150:])) << 32
		sb.freeBlocks |= int64(le.Uint32(buf[0x158:])) << 32
	}
	l := buf[0x78 : 0x78+labelMax]
	for i, c := range l {
		if c == 0 {
			l = l[:i]
			break
		}
	}
	sb.label = string(l)
	return sb, nil
}

func (s superblock) size() int64 { return s.blocks * s.blockSize }
func (s superblock) used() int64 { return (s.blocks - s.freeBlocks) * s.blockSize }
func (s superblock) free() int64 { return s.freeBlocks * s.blockSize }
