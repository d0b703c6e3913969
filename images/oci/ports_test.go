package oci

import (
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestPorts: the exposed ports a route can point at, sorted; the web
// port is the lowest TCP one.
func TestPorts(t *testing.T) {
	for _, tc := range []struct {
		exposed []string
		want    []string
		web     int
	}{
		{nil, nil, 0},
		{[]string{"8080/tcp"}, []string{"8080/tcp"}, 8080},
		// A bare number is tcp; the same port twice is one.
		{[]string{"80", "80/tcp", "443/TCP"}, []string{"80/tcp", "443/tcp"}, 80},
		{[]string{"53/udp", "53/tcp", "9000/tcp"}, []string{"53/tcp", "53/udp", "9000/tcp"}, 53},
		{[]string{"53/udp", "9000/tcp"}, []string{"53/udp", "9000/tcp"}, 9000},
		{[]string{"53/udp"}, []string{"53/udp"}, 0},
		// What no route can point at is left out.
		{[]string{"8000-8010/tcp", "0/tcp", "70000/tcp", "132/sctp", "http/tcp", ""}, nil, 0},
	} {
		img := &Image{Config: v1.Config{ExposedPorts: map[string]struct{}{}}}
		for _, p := range tc.exposed {
			img.Config.ExposedPorts[p] = struct{}{}
		}
		if got := img.Ports(); !slices.Equal(got, tc.want) {
			t.Errorf("Ports() of %q = %q, want %q", tc.exposed, got, tc.want)
		}
		if got := img.WebPort(); got != tc.web {
			t.Errorf("WebPort() of %q = %d, want %d", tc.exposed, got, tc.web)
		}
	}
}
