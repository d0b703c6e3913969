package oci

import (
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestPorts(t *testing.T) {
	for _, tc := range []struct {
		exposed []string
		want    []string
	}{
		{nil, nil},
		{[]string{"8080/tcp"}, []string{"8080/tcp"}},
		// A bare number is tcp; the same port twice is one.
		{[]string{"80", "80/tcp", "443/TCP"}, []string{"80/tcp", "443/tcp"}},
		{[]string{"53/udp", "53/tcp", "9000/tcp"}, []string{"53/tcp", "53/udp", "9000/tcp"}},
		// What no route can point at is left out.
		{[]string{"8000-8010/tcp", "0/tcp", "70000/tcp", "132/sctp", "http/tcp", ""}, nil},
	} {
		img := &Image{Config: v1.Config{ExposedPorts: map[string]struct{}{}}}
		for _, p := range tc.exposed {
			img.Config.ExposedPorts[p] = struct{}{}
		}
		if got := img.Ports(); !slices.Equal(got, tc.want) {
			t.Errorf("Ports() of %q = %q, want %q", tc.exposed, got, tc.want)
		}
	}
}
