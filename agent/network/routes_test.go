package network

import (
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestProxyRoutes: routes an Ingress serves stay out of the proxy, the
// others go to the target the resolver gives, and routes with no target
// yet are left out.
func TestProxyRoutes(t *testing.T) {
	guests := map[string]*corpusv1.Guest{
		"g1": {Id: "g1", Name: "web", Address: "10.210.1.5"},
		"g2": {Id: "g2", Name: "api"},
	}
	routes := []*corpusv1.Route{
		{Id: "r1", Kind: string(corpusv1.RouteHTTP), Domain: "web.example.org", GuestId: "g1", GuestPort: 80},
		{Id: "r2", Kind: string(corpusv1.RouteHTTP), Domain: "api.example.org", GuestId: "g2", GuestPort: 8080},
		{Id: "r3", Kind: string(corpusv1.RouteTCP), ListenPort: 5432, GuestId: "g2", GuestPort: 5432},
		{Id: "r4", Kind: string(corpusv1.RouteHTTP), Domain: "gone.example.org", GuestId: "g9", GuestPort: 80},
		{Id: "r5", Kind: string(corpusv1.RouteHTTP), Domain: "pending.example.org", GuestId: "g2", GuestPort: 9999},
	}
	target := func(r *corpusv1.Route, g *corpusv1.Guest) string {
		switch {
		case g.Id == "g1":
			return "10.210.1.5:80"
		case r.GuestPort == 9999:
			return "" // no Service port yet
		}
		return "127.100.0.7:" + map[int32]string{8080: "8080", 5432: "5432"}[r.GuestPort]
	}
	got := ProxyRoutes(routes, guests, map[string]bool{"r2": true}, target)
	if len(got.HTTP) != 1 || got.HTTP["web.example.org"].Targets[0] != "10.210.1.5:80" {
		t.Errorf("http routes = %v, want web.example.org only (api's is an Ingress, pending has no target)", got.HTTP)
	}
	if len(got.TCP) != 1 || got.TCP[5432].Target != "127.100.0.7:5432" {
		t.Errorf("tcp routes = %v, want 5432 to the service", got.TCP)
	}
}
