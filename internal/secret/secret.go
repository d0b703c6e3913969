// Package secret makes random identifiers and credentials and compares
// credentials with their stored hashes.
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
)

// Hex returns n random bytes from the kernel's CSPRNG, hex encoded.
func Hex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand panics on a broken kernel source)
	return hex.EncodeToString(b)
}

// Hash returns the hex SHA-256 of a secret, the form secrets are stored in.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Equal compares a secret with a stored hash in constant time.
func Equal(secret, hash string) bool {
	return subtle.ConstantTimeCompare([]byte(Hash(secret)), []byte(hash)) == 1
}
