package oci

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Ports are the ports the image says its process listens on, from its
// config's ExposedPorts, as "8080/tcp" or "53/udp" (a key without a
// protocol is tcp, as Docker reads it), sorted by number, then protocol.
// Keys that name no single port of 1 to 65535 over tcp or udp (ranges,
// sctp) are left out: an image's exposed ports document it, and only a
// port a route can point at is offered.
func (img *Image) Ports() []string {
	type port struct {
		n     int
		proto string
	}
	var ps []port
	for k := range img.Config.ExposedPorts {
		num, proto, ok := strings.Cut(strings.ToLower(strings.TrimSpace(k)), "/")
		if !ok {
			proto = "tcp"
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 65535 || (proto != "tcp" && proto != "udp") {
			continue
		}
		ps = append(ps, port{n, proto})
	}
	slices.SortFunc(ps, func(a, b port) int { return cmp.Or(cmp.Compare(a.n, b.n), cmp.Compare(a.proto, b.proto)) })
	ps = slices.Compact(ps)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, strconv.Itoa(p.n)+"/"+p.proto)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// WebPort is the port the image's web process listens on, as far as the
// image says: the lowest TCP port it exposes, 0 when it exposes none.
func (img *Image) WebPort() int {
	for _, p := range img.Ports() {
		if num, proto, _ := strings.Cut(p, "/"); proto == "tcp" {
			n, _ := strconv.Atoi(num)
			return n
		}
	}
	return 0
}
