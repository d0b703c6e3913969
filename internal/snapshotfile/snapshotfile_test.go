package snapshotfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

// write makes a snapshot file sealed with secret and returns its path.
func write(t *testing.T, secret string, edit func(h *corpusv1.SnapshotHeader)) string {
	t.Helper()
	k, err := NewKey([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	h := &corpusv1.SnapshotHeader{FormatVersion: FormatVersion, ClusterId: "c0ffee", RaftIndex: 42, RaftTerm: 3, Counts: map[string]uint64{"guests": 2}}
	k.Describe(h)
	payload, err := Seal(k.Bytes, h, &corpusv1.SnapshotContents{State: []byte("state"), CaCert: []byte("cert"), CaKey: []byte("the CA key")})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(h)
	}
	var b bytes.Buffer
	if err := Encode(&b, h); err != nil {
		t.Fatal(err)
	}
	b.Write(payload)
	p := filepath.Join(t.TempDir(), "snap")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const secret = "correct horse battery staple"

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	p := write(t, secret, nil)
	raw, _ := os.ReadFile(p)
	if bytes.Contains(raw, []byte("the CA key")) || bytes.Contains(raw, []byte("state")) {
		t.Fatal("the file holds the CA key or the state in clear")
	}
	h, payload, err := Read(p)
	if err != nil {
		t.Fatalf("Read = %v", err)
	}
	if h.ClusterId != "c0ffee" || h.RaftIndex != 42 || h.Counts["guests"] != 2 {
		t.Errorf("header = %v", h)
	}
	c, err := Open(h, payload, []byte(secret))
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	want := &corpusv1.SnapshotContents{State: []byte("state"), CaCert: []byte("cert"), CaKey: []byte("the CA key")}
	if !proto.Equal(c, want) {
		t.Errorf("Open = %v, want %v", c, want)
	}
}

// TestRefusals: what is not a whole snapshot of this format, sealed with
// this key for the cluster and index its header names, is refused with
// the error that says which.
func TestRefusals(t *testing.T) {
	t.Parallel()
	good := write(t, secret, nil)
	raw, _ := os.ReadFile(good)
	file := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "snap")
		os.WriteFile(p, b, 0o600)
		return p
	}
	flipped := bytes.Clone(raw)
	flipped[len(flipped)-5] ^= 1
	for _, tc := range []struct {
		name, path, secret string
		want               error
	}{
		{"empty", file(nil), secret, ErrNotSnapshot},
		{"another file", file([]byte("#!/bin/sh\necho hello, this is not a snapshot\n")), secret, ErrNotSnapshot},
		{"header cut", file(raw[:len(Magic)+8]), secret, ErrCorrupt},
		{"truncated", file(raw[:len(raw)-10]), secret, ErrCorrupt},
		{"longer", file(append(bytes.Clone(raw), 0)), secret, ErrCorrupt},
		{"bit flipped", file(flipped), secret, ErrCorrupt},
		{"newer format", write(t, secret, func(h *corpusv1.SnapshotHeader) { h.FormatVersion = FormatVersion + 1 }), secret, ErrNewerFormat},
		{"wrong key", good, "another secret of some length", ErrWrongKey},
		{"header names another cluster", write(t, secret, func(h *corpusv1.SnapshotHeader) { h.ClusterId = "beef" }), secret, ErrWrongKey},
		{"header names another index", write(t, secret, func(h *corpusv1.SnapshotHeader) { h.RaftIndex = 7 }), secret, ErrWrongKey},
		{"costly kdf", write(t, secret, func(h *corpusv1.SnapshotHeader) { h.KdfLogN = 30 }), secret, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, payload, err := Read(tc.path)
			if err == nil {
				_, err = Open(h, payload, []byte(tc.secret))
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Read+Open = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("hunter2\n"), 0o600)
	if _, err := ReadSecret(short); err == nil {
		t.Error("ReadSecret(7 bytes) = nil error, want a refusal")
	}
	ok := filepath.Join(dir, "ok")
	os.WriteFile(ok, []byte(secret+"\n"), 0o600)
	if s, err := ReadSecret(ok); err != nil || string(s) != secret {
		t.Errorf("ReadSecret = %q, %v; want the line without its newline", s, err)
	}
}

func FuzzReadHeader(f *testing.F) {
	f.Add([]byte(Magic + "\x00\x00\x00\x02\x08\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ReadHeader(bytes.NewReader(b))
	})
}
