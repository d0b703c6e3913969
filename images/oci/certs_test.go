package oci

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// TestRegistryWithItsOwnCA: a registry whose certificate comes from an
// authority of its own is refused, saying where that authority goes,
// until it is in CertsDir/HOST/ca.crt; one that asks for a client
// certificate is refused without one and served with the one beside
// it. Other registries are not affected.
func TestRegistryWithItsOwnCA(t *testing.T) {
	t.Parallel()
	for _, clientCerts := range []bool{false, true} {
		t.Run(fmt.Sprintf("client certificates %t", clientCerts), func(t *testing.T) {
			t.Parallel()
			r := ocitest.ServeTLS(t, clientCerts)
			reg := r.Host
			ref := reg + "/test/app:1"
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = r.Client(t)
			want := ocitest.Push(t, ref, ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.File{Name: "hello", Body: "hi"})), remote.WithTransport(tr))
			plain := ocitest.Registry(t)
			ocitest.Push(t, plain+"/test/app:1", ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.File{Name: "x", Body: "x"})))

			s := &Store{Root: t.TempDir(), CertsDir: t.TempDir()}
			ctx := context.Background()
			caFile := filepath.Join(s.CertsDir, reg, "ca.crt")
			if _, err := s.Pull(ctx, ref, nil); err == nil || !strings.Contains(err.Error(), "not trust") || !strings.Contains(err.Error(), caFile) {
				t.Fatalf("Pull from a registry of an unknown authority = %v, want a refusal naming %s", err, caFile)
			}
			if err := os.MkdirAll(filepath.Dir(caFile), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(caFile, r.CA, 0o644); err != nil {
				t.Fatal(err)
			}
			if clientCerts {
				if _, err := s.Pull(ctx, ref, nil); err == nil {
					t.Fatal("Pull without the client certificate the registry asks for succeeded")
				}
				if err := os.WriteFile(filepath.Join(s.CertsDir, reg, "client.cert"), r.ClientCert, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(s.CertsDir, reg, "client.key"), r.ClientKey, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			img, err := s.Pull(ctx, ref, nil)
			if err != nil {
				t.Fatalf("Pull with the registry's authority trusted: %v", err)
			}
			if img.Digest != want {
				t.Errorf("pulled %s, pushed %s", img.Digest, want)
			}
			// A registry with no folder there pulls as before.
			if _, err := s.Pull(ctx, plain+"/test/app:1", nil); err != nil {
				t.Errorf("Pull from a registry without certificates of its own: %v", err)
			}
			// A folder holding something that is no certificate says so.
			bad := filepath.Join(s.CertsDir, plain, "ca.crt")
			os.MkdirAll(filepath.Dir(bad), 0o755)
			os.WriteFile(bad, []byte("not a certificate"), 0o644)
			if _, err := s.Pull(ctx, plain+"/test/app:1", nil); err == nil || !strings.Contains(err.Error(), bad) {
				t.Errorf("Pull with a broken ca.crt = %v, want an error naming it", err)
			}
		})
	}
}
