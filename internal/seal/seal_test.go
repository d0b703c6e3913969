package seal

import (
	"bytes"
	"errors"
	"testing"
)

func testKeyring(t *testing.T, ids ...string) *Keyring {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range ids {
		keys[id] = NewKey()
	}
	k, err := NewKeyring(ids[0], keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := testKeyring(t, "k1")
	secret := []byte("postgres://app:hunter2@db/app")
	s, err := k.Seal(secret, "config/site/prod/DATABASE_URL")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s, secret) || bytes.Contains(s, []byte("hunter2")) {
		t.Fatal("the sealed value holds the secret in clear")
	}
	if id, _ := KeyID(s); id != "k1" {
		t.Fatalf("KeyID = %q, want k1", id)
	}
	got, err := k.Open(s, "config/site/prod/DATABASE_URL")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Twice sealed, two ciphertexts (random nonces).
	s2, _ := k.Seal(secret, "config/site/prod/DATABASE_URL")
	if bytes.Equal(s, s2) {
		t.Fatal("two seals of one value are equal")
	}
}

func TestOpenRefusesAnotherPlaceOrDamage(t *testing.T) {
	k := testKeyring(t, "k1")
	s, _ := k.Seal([]byte("v"), "config/site/prod/A")
	if _, err := k.Open(s, "config/site/prod/B"); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened at another place: %v", err)
	}
	if _, err := k.Open(s, "config/other/prod/A"); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened for another project: %v", err)
	}
	for i := range s {
		d := bytes.Clone(s)
		d[i] ^= 0x40
		if _, err := k.Open(d, "config/site/prod/A"); err == nil {
			t.Fatalf("a value damaged at byte %d opened", i)
		}
	}
	if _, err := k.Open(s[:len(s)-1], "config/site/prod/A"); err == nil {
		t.Fatal("a truncated value opened")
	}
	if _, err := k.Open(nil, "x"); !errors.Is(err, ErrOpen) {
		t.Fatalf("nil opened: %v", err)
	}
}

func TestKeyringOpensWithEveryKeySealsWithPrimary(t *testing.T) {
	old := testKeyring(t, "k1")
	s, _ := old.Seal([]byte("v"), "p")
	both, err := NewKeyring("k2", map[string][]byte{"k1": old.keys["k1"], "k2": NewKey()})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := both.Open(s, "p"); err != nil || string(got) != "v" {
		t.Fatalf("a value of the older key: %q, %v", got, err)
	}
	s2, _ := both.Seal([]byte("v"), "p")
	if id, _ := KeyID(s2); id != "k2" {
		t.Fatalf("sealed with %s, want the primary k2", id)
	}
	if _, err := old.Open(s2, "p"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("the old keyring opened a value of a key it lacks: %v", err)
	}
	if _, err := NewKeyring("k3", map[string][]byte{"k1": NewKey()}); err == nil {
		t.Fatal("a primary outside the keyring was accepted")
	}
	if _, err := NewKeyring("k1", map[string][]byte{"k1": []byte("short")}); err == nil {
		t.Fatal("a short key was accepted")
	}
}

func TestWrapUnwrap(t *testing.T) {
	kek, err := KEK([]byte("-----BEGIN EC PRIVATE KEY-----\nnot really\n"))
	if err != nil {
		t.Fatal(err)
	}
	kek2, _ := KEK([]byte("-----BEGIN EC PRIVATE KEY-----\nnot really\n"))
	if !bytes.Equal(kek, kek2) || len(kek) != KeySize {
		t.Fatal("KEK is not a stable 32-byte derivation")
	}
	other, _ := KEK([]byte("another CA"))
	key := NewKey()
	w, err := Wrap(kek, key, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(w, key) {
		t.Fatal("the wrapped key holds the key in clear")
	}
	if got, err := Unwrap(kek, w, "k1"); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("Unwrap = %x, %v", got, err)
	}
	if _, err := Unwrap(other, w, "k1"); !errors.Is(err, ErrOpen) {
		t.Fatalf("another CA's KEK unwrapped it: %v", err)
	}
	if _, err := Unwrap(kek, w, "k2"); !errors.Is(err, ErrOpen) {
		t.Fatalf("unwrapped under another id: %v", err)
	}
	if _, err := KEK(nil); err == nil {
		t.Fatal("a KEK from nothing")
	}
}
