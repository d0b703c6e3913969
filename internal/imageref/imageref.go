// Package imageref tells an OCI image reference ("registry.example/app:1.2",
// "localhost:5000/web@sha256:...") from the name of an image a driver
// builds itself ("busybox", "debian/bookworm"), and parses references.
// It is the one place that rule lives: the CLI, the coordinator and the
// drivers all ask it.
package imageref

import (
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// IsReference reports whether image names an OCI image in a registry
// rather than an image a driver builds. As Docker tells a registry host
// from a repository's first component, a reference has a "/" and the part
// before it is "localhost" or holds a "." or a ":"; built image names
// ("busybox", "debian/bookworm") never do.
func IsReference(image string) bool {
	host, rest, ok := strings.Cut(image, "/")
	if !ok || rest == "" {
		return false
	}
	return host == "localhost" || strings.ContainsAny(host, ".:")
}

// Parse parses an OCI image reference REGISTRY/REPO[:TAG][@sha256:DIGEST]
// (a missing tag is "latest"). insecure says whether the registry may
// be reached over plain HTTP; a registry on a loopback address always
// may (Loopback). An image that is not a reference (IsReference) is an
// error naming what one looks like.
func Parse(image string, insecure bool) (name.Reference, error) {
	if !IsReference(image) {
		return nil, fmt.Errorf("image %q is not an OCI reference (want REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST, the registry host holding a '.' or ':' or being localhost)", image)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(image, opts...)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", image, err)
	}
	return ref, nil
}

// DockerHub is Docker Hub's registry as pulls reach it, what references
// that name no registry (nginx:1.25) or docker.io mean.
const DockerHub = name.DefaultRegistry

// ParseAny parses image as a driver that takes any image reference
// pulls it (the kubernetes driver: its cluster's kubelets pull Docker
// Hub's short names, nginx:1.25, too): a reference without a registry
// host is Docker Hub's (index.docker.io/library/nginx:1.25).
func ParseAny(image string) (name.Reference, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", image, err)
	}
	return ref, nil
}

// Loopback reports whether registry (a host, with or without a port) is
// on a loopback address: "localhost", 127.0.0.0/8 or ::1.
func Loopback(registry string) bool {
	host := registry
	if h, _, err := net.SplitHostPort(registry); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ValidDigest checks an image manifest digest as a release records it:
// "sha256:" and 64 lowercase hex digits.
func ValidDigest(digest string) error {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return fmt.Errorf("image digest %.80q: want sha256: and 64 lowercase hex digits", digest)
	}
	return nil
}

// Registry checks host, a registry as references name it
// ("registry.example", "registry.example:5000", "127.0.0.1:5000"), and
// returns it as a pull reaches it: "docker.io" is "index.docker.io". A
// scheme or a path is refused: credentials are per registry.
func Registry(host string) (string, error) {
	if host == "" {
		return "", fmt.Errorf("no registry given (want HOST or HOST:PORT, as image references name it)")
	}
	if strings.Contains(host, "://") || strings.Contains(host, "/") {
		return "", fmt.Errorf("registry %.80q: want HOST or HOST:PORT, as image references name it, without a scheme or a path", host)
	}
	r, err := name.NewRegistry(host, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("registry %.80q: %w", host, err)
	}
	return r.RegistryStr(), nil
}
