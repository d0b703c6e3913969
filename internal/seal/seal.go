// Package seal is the cluster's one way of keeping a secret at rest:
// project config and secrets now, service credentials and certificate keys
// as they come. A value is sealed with AES-256-GCM under a data key of the
// cluster's keyring, with the place it belongs to as additional data, so
// a sealed value copied to another key, project or environment does not
// open there.
//
// The data keys live in the replicated state, each wrapped (AES-256-GCM
// again) by a key-encryption key that every coordinator derives with HKDF
// from the cluster CA's private key, which every replica holds and the
// state never does. The raft log, its snapshots and the agents' caches
// therefore only ever carry ciphertext; whoever holds the CA key can open
// it, which they could anyway by minting themselves a coordinator
// certificate. Rotation adds a new data key, seals every value again with
// it and drops the old keys in one replicated write.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// version is the first byte of every sealed value and wrapped key.
const version = 1

// KeySize is the size of data keys and of the key-encryption key.
const KeySize = 32

// ErrOpen is returned (wrapped) when a value does not open: a wrong key,
// a value moved to another place, or damage. It never says which.
var ErrOpen = errors.New("sealed value does not open")

// ErrUnknownKey is returned (wrapped) for a value sealed by a key the
// keyring does not hold.
var ErrUnknownKey = errors.New("sealed by a key this keyring does not hold")

// KEK derives the key-encryption key from the cluster CA's private key
// (its DER or PEM bytes: any stable encoding of the secret works, as long
// as every replica passes the same one).
func KEK(caKey []byte) ([]byte, error) {
	if len(caKey) == 0 {
		return nil, errors.New("seal: no CA key to derive the key-encryption key from")
	}
	return hkdf.Key(sha256.New, caKey, []byte("corpus seal"), "corpus key-encryption key v1", KeySize)
}

// NewKey returns a fresh random data key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	rand.Read(k) // never fails
	return k
}

// Wrap seals a data key under the key-encryption key; id is bound to it.
func Wrap(kek, key []byte, id string) ([]byte, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal: data key of %d bytes, want %d", len(key), KeySize)
	}
	return sealWith(kek, id, key, "key "+id)
}

// Unwrap opens a data key wrapped by Wrap.
func Unwrap(kek, wrapped []byte, id string) ([]byte, error) {
	key, err := openWith(kek, wrapped, "key "+id)
	if err != nil {
		return nil, fmt.Errorf("data key %s: %w", id, err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("data key %s: %w", id, ErrOpen)
	}
	return key, nil
}

// Keyring holds the data keys that open values, and the primary one that
// seals new ones.
type Keyring struct {
	primary string
	keys    map[string][]byte
}

// NewKeyring returns a keyring of keys (id → data key) sealing with
// primary, which must be one of them.
func NewKeyring(primary string, keys map[string][]byte) (*Keyring, error) {
	if _, ok := keys[primary]; !ok {
		return nil, fmt.Errorf("seal: primary key %q is not in the keyring", primary)
	}
	k := &Keyring{primary: primary, keys: make(map[string][]byte, len(keys))}
	for id, key := range keys {
		if len(key) != KeySize || id == "" || len(id) > 255 {
			return nil, fmt.Errorf("seal: key %q is not a %d-byte key with a short id", id, KeySize)
		}
		k.keys[id] = key
	}
	return k, nil
}

// Primary is the id of the key new values are sealed with.
func (k *Keyring) Primary() string { return k.primary }

// Seal seals plaintext for place (what it is and where it belongs, such
// as "config/site/prod/DATABASE_URL") with the primary key.
func (k *Keyring) Seal(plaintext []byte, place string) ([]byte, error) {
	return sealWith(k.keys[k.primary], k.primary, plaintext, place)
}

// Open opens a value sealed for place by any key of the keyring.
func (k *Keyring) Open(sealed []byte, place string) ([]byte, error) {
	id, err := KeyID(sealed)
	if err != nil {
		return nil, err
	}
	key, ok := k.keys[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w (%s)", place, ErrUnknownKey, id)
	}
	p, err := openWith(key, sealed, place)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", place, err)
	}
	return p, nil
}

// KeyID says which key sealed a value, without opening it.
func KeyID(sealed []byte) (string, error) {
	if len(sealed) < 2 || sealed[0] != version || len(sealed) < 2+int(sealed[1]) {
		return "", fmt.Errorf("not a sealed value: %w", ErrOpen)
	}
	return string(sealed[2 : 2+int(sealed[1])]), nil
}

// sealWith writes version | len(id) | id | nonce | ciphertext; the header
// and place are the additional data.
func sealWith(key []byte, id string, plaintext []byte, place string) ([]byte, error) {
	if len(id) == 0 || len(id) > 255 {
		return nil, fmt.Errorf("seal: key id %q: want 1 to 255 bytes", id)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	head := append([]byte{version, byte(len(id))}, id...)
	out := make([]byte, len(head), len(head)+aead.NonceSize()+len(plaintext)+aead.Overhead())
	copy(out, head)
	nonce := out[len(head) : len(head)+aead.NonceSize()]
	out = out[:len(head)+aead.NonceSize()]
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		return nil, err
	}
	return aead.Seal(out, nonce, plaintext, additional(head, place)), nil
}

func openWith(key, sealed []byte, place string) ([]byte, error) {
	id, err := KeyID(sealed)
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	head := sealed[:2+len(id)]
	rest := sealed[len(head):]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrOpen
	}
	p, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], additional(head, place))
	if err != nil {
		return nil, ErrOpen
	}
	return p, nil
}

func additional(head []byte, place string) []byte {
	return append(append([]byte(nil), head...), place...)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal: key of %d bytes, want %d", len(key), KeySize)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}
