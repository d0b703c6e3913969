package oci

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// keychain answers user and password for registry host, and
// authn.Anonymous for any other; err, when set, is its answer.
type keychain struct {
	host, user, password string
	err                  error
	asked                []string
}

func (k *keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	k.asked = append(k.asked, r.RegistryStr())
	if k.err != nil {
		return nil, k.err
	}
	if r.RegistryStr() != k.host {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(authn.AuthConfig{Username: k.user, Password: k.password}), nil
}

// TestPullPrivate pulls from a registry behind basic authentication:
// with the right credentials the image comes, and the store's files
// never hold the password; with wrong ones, or none, the pull fails
// saying which registry refused what for which repository.
func TestPullPrivate(t *testing.T) {
	t.Parallel()
	const user, password = "puller", "registry-pw-planted"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.ServePrivate(t, ln, user, password)
	ref := reg + "/team/private:1"
	want := ocitest.Push(t, ref, ocitest.Image(t, v1.Config{Cmd: []string{"/bin/app"}}, base(t)),
		remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	ctx := context.Background()

	right := &keychain{host: reg, user: user, password: password}
	s := &Store{Root: t.TempDir(), Keychain: right}
	img, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatalf("Pull with the right credentials = %v", err)
	}
	if img.Digest != want || len(img.Layers) != 1 {
		t.Errorf("Pull = %s with %d layers, want %s with 1", img.Digest, len(img.Layers), want)
	}
	if len(right.asked) != 1 || right.asked[0] != reg {
		t.Errorf("the keychain was asked for %v, want %s once", right.asked, reg)
	}
	filepath.WalkDir(s.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the registry password", path)
		}
		return nil
	})

	for _, tc := range []struct {
		name     string
		keychain authn.Keychain
		want     string
	}{
		{"wrong credentials", &keychain{host: reg, user: user, password: "wrong"}, "registry " + reg + " refused the credentials for team/private"},
		{"credentials of another registry", &keychain{host: "registry.example.test", user: user, password: password}, "registry " + reg + " wants credentials for team/private (corpus registry login " + reg + ")"},
		{"no keychain", nil, "registry " + reg + " wants credentials for team/private"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{Root: t.TempDir(), Keychain: tc.keychain}
			_, err := s.Pull(ctx, ref, nil)
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Pull = %v; want ErrUnauthorized saying %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), password) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	t.Run("keychain fails", func(t *testing.T) {
		s := &Store{Root: t.TempDir(), Keychain: &keychain{err: errors.New("coordinator unreachable")}}
		_, err := s.Pull(ctx, ref, nil)
		if err == nil || !strings.Contains(err.Error(), "getting the credentials of registry "+reg+": coordinator unreachable") {
			t.Errorf("Pull = %v; want it to say the credentials could not be had", err)
		}
	})
}
