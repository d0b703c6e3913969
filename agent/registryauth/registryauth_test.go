package registryauth

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci"
	"corpus/images/oci/ocitest"
)

// TestKeychainPulls pulls from a real private registry through the
// keychain, its source standing in for the coordinator (a fake: the
// coordinator's side is tested in coordinator and test/e2e). The
// credentials given pull; none, or no coordinator answering, go
// anonymous and the registry says it wants credentials; a refusal
// fails the pull with it.
func TestKeychainPulls(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.ServePrivate(t, ln, "puller", "pw-planted")
	ref := reg + "/team/app:1"
	ocitest.Push(t, ref, ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.File{Name: "a", Body: "a"})),
		remote.WithAuth(&authn.Basic{Username: "puller", Password: "pw-planted"}))

	for _, tc := range []struct {
		name string
		src  Source
		want string // "" when the pull works
	}{
		{"credentials", func(_ context.Context, host string) (Credentials, error) {
			if host != reg {
				return Credentials{}, errors.New("asked for " + host)
			}
			return Credentials{Found: true, Username: "puller", Password: "pw-planted"}, nil
		}, ""},
		{"none set", func(context.Context, string) (Credentials, error) { return Credentials{}, nil }, "wants credentials"},
		{"no coordinator", func(context.Context, string) (Credentials, error) {
			return Credentials{}, connect.NewError(connect.CodeUnavailable, errors.New("no coordinator"))
		}, "wants credentials"},
		{"refused", func(context.Context, string) (Credentials, error) {
			return Credentials{}, connect.NewError(connect.CodePermissionDenied, errors.New("node n1 runs no guest"))
		}, "node n1 runs no guest"},
		{"not pointed at a coordinator yet", nil, "wants credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Keychain{}
			if tc.src != nil {
				k.Use(tc.src)
			}
			s := &oci.Store{Root: t.TempDir(), Keychain: k}
			_, err := s.Pull(context.Background(), ref, nil)
			if tc.want == "" && err != nil {
				t.Fatalf("Pull = %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Pull = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestResolveKnown tells "no credentials" (known, anonymous) from
// "cannot tell now" (no coordinator answered, or none to ask yet).
func TestResolveKnown(t *testing.T) {
	t.Parallel()
	res, err := name.ParseReference("registry.example/app:1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		src       Source
		known     bool
		anonymous bool
		err       bool
	}{
		{"credentials", func(context.Context, string) (Credentials, error) {
			return Credentials{Found: true, Username: "u", Password: "p"}, nil
		}, true, false, false},
		{"none set", func(context.Context, string) (Credentials, error) { return Credentials{}, nil }, true, true, false},
		{"no coordinator", func(context.Context, string) (Credentials, error) {
			return Credentials{}, connect.NewError(connect.CodeUnavailable, errors.New("no coordinator"))
		}, false, false, true},
		{"refused", func(context.Context, string) (Credentials, error) {
			return Credentials{}, connect.NewError(connect.CodePermissionDenied, errors.New("no"))
		}, true, false, true},
		{"not pointed at a coordinator yet", nil, false, false, false},
	} {
		k := &Keychain{}
		if tc.src != nil {
			k.Use(tc.src)
		}
		a, known, err := k.ResolveKnown(context.Background(), res.Context())
		if known != tc.known || (a == authn.Anonymous) != tc.anonymous || (err != nil) != tc.err {
			t.Errorf("%s: ResolveKnown = %v, known %t, %v; want known %t, anonymous %t, error %t", tc.name, a, known, err, tc.known, tc.anonymous, tc.err)
		}
	}
}
