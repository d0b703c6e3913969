// Package secret makes random identifiers and credentials.
package secret

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes from the kernel's CSPRNG, hex encoded.
func Hex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand panics on a broken kernel source)
	return hex.EncodeToString(b)
}
