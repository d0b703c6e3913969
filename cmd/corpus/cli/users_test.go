package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testPublicKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ3Nn2a8xvnsY4OeUK0ha4Xq7ydSX2BQ/JsA4Nox8GQp alice@laptop"

func TestReadPublicKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	privateWithPub := write("id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
	write("id_ed25519.pub", testPublicKey+"\n")
	for _, c := range []struct {
		name, file, stdin string
		want              string // the line, or a part of the error
		ok                bool
	}{
		{name: "pub file", file: write("a.pub", testPublicKey+"\n"), want: testPublicKey, ok: true},
		{name: "blank lines and CRLF", file: write("b.pub", "\n  \r\n"+testPublicKey+"\r\nssh-rsa AAAA second\n"), want: testPublicKey, ok: true},
		{name: "no newline", file: write("c.pub", testPublicKey), want: testPublicKey, ok: true},
		{name: "stdin", file: "-", stdin: "\n" + testPublicKey + "\n", want: testPublicKey, ok: true},
		{name: "private key names its .pub", file: privateWithPub, want: "holds a private key, which never leaves this machine: give " + privateWithPub + ".pub instead"},
		{name: "private RSA key", file: write("rsa", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n"), want: "give the .pub file (e.g. ~/.ssh/id_ed25519.pub) instead"},
		{name: "private key on stdin", file: "-", stdin: "-----BEGIN OPENSSH PRIVATE KEY-----\n", want: "stdin holds a private key"},
		{name: "putty private key", file: write("k.ppk", "PuTTY-User-Key-File-3: ssh-ed25519\n"), want: "holds a private key"},
		{name: "empty", file: write("empty.pub", "\n\n"), want: "is empty"},
		{name: "empty stdin", file: "-", want: "stdin is empty"},
		{name: "too large", file: write("big.pub", strings.Repeat("x", maxKeyFile+1)), want: "is over 64 KiB"},
		{name: "missing", file: filepath.Join(dir, "nope.pub"), want: "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := readPublicKey(c.file, strings.NewReader(c.stdin))
			switch {
			case c.ok && (err != nil || got != c.want):
				t.Errorf("readPublicKey(%s) = %q, %v; want %q", c.file, got, err, c.want)
			case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("readPublicKey(%s) = %q, %v; want an error with %q", c.file, got, err, c.want)
			}
		})
	}
}

func FuzzReadPublicKey(f *testing.F) {
	for _, s := range []string{testPublicKey, "\n\n", "-----BEGIN OPENSSH PRIVATE KEY-----\n", "a\r\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		line, err := readPublicKey("-", strings.NewReader(s))
		if err != nil {
			return
		}
		if line == "" || strings.ContainsAny(line, "\n") || line != strings.TrimSpace(line) || strings.Contains(s, "PRIVATE KEY-----") {
			t.Fatalf("readPublicKey(%q) = %q, want one trimmed non-empty line of a non-private key", s, line)
		}
	})
}
