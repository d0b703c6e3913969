package kubernetes

import (
	"errors"
	"net"
	"strconv"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/drivers"
	"corpus/internal/k8stest"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestIngress publishes routes against a real API server. It has a
// cluster of its own: IngressClasses are cluster-wide, and detecting
// them is part of what is tested. No ingress controller runs: the
// Ingress objects are checked, not traffic through them.
func TestIngress(t *testing.T) {
	c := k8stest.Start(t)
	e := newEnv(t, c, "ing")
	s := spec("1a1a000000000001", "web")
	s.Ports = []drivers.Port{{GuestPort: 80, HostPort: 8080, Protocol: "tcp"}, {GuestPort: 5432, Protocol: "tcp"}}
	e.create(s)
	routes := []drivers.Route{
		{ID: "00000000000000a1", Kind: corpusv1.RouteHTTP, Domain: "web.example.org", GuestID: s.ID, Guest: "web", GuestPort: 80},
		{ID: "00000000000000a2", Kind: corpusv1.RouteTCP, ListenPort: 15432, GuestID: s.ID, Guest: "web", GuestPort: 5432},
	}
	ings := e.client.NetworkingV1().Ingresses(e.d.Namespace())
	ingress := func(name string) *networkingv1.Ingress {
		t.Helper()
		ing, err := ings.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading ingress %s: %v", name, err)
		}
		return ing
	}
	publish := func(d *Driver, rs []drivers.Route) map[string]bool {
		t.Helper()
		served, err := d.PublishRoutes(e.ctx, rs)
		if err != nil {
			t.Fatalf("PublishRoutes = %v", err)
		}
		return served
	}

	// No IngressClass in the cluster: nothing is published; the proxy
	// serves the routes, at the Service's cluster IP.
	if served := publish(e.d, routes); len(served) != 0 {
		t.Errorf("PublishRoutes without an ingress class served %v, want none", served)
	}
	if list, _ := ings.List(e.ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("ingresses without an ingress class: %d, want none", len(list.Items))
	}
	svc := e.service("web")
	for _, tc := range []struct{ port, want int }{{80, 8080}, {5432, 5432}} {
		got, err := e.d.RouteTarget(e.ctx, "web", tc.port)
		if want := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(tc.want)); err != nil || got != want {
			t.Errorf("RouteTarget(web, %d) = %q, %v; want %q", tc.port, got, err, want)
		}
	}
	if _, err := e.d.RouteTarget(e.ctx, "web", 9999); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("RouteTarget(web, unpublished port) = %v, want ErrNotFound", err)
	}
	if _, err := e.d.RouteTarget(e.ctx, "nope", 80); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("RouteTarget(no guest) = %v, want ErrNotFound", err)
	}

	// A cluster with one class: a new driver finds it.
	for _, ic := range []string{"traefik"} {
		if _, err := e.client.NetworkingV1().IngressClasses().Create(e.ctx, &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: ic}, Spec: networkingv1.IngressClassSpec{Controller: "example.com/" + ic},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "ing"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if class, err := d.IngressClass(e.ctx); err != nil || class != "traefik" {
		t.Fatalf("IngressClass with one class = %q, %v; want traefik", class, err)
	}

	t.Run("created", func(t *testing.T) {
		served := publish(d, routes)
		if !served["00000000000000a1"] || served["00000000000000a2"] {
			t.Errorf("served = %v, want the http route only (tcp goes through the proxy)", served)
		}
		ing := ingress("route-00000000000000a1")
		r := ing.Spec.Rules
		if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "traefik" || len(r) != 1 || r[0].Host != "web.example.org" ||
			r[0].HTTP.Paths[0].Backend.Service.Name != "web" || r[0].HTTP.Paths[0].Backend.Service.Port.Number != 8080 {
			t.Errorf("ingress = %+v; want class traefik, host web.example.org, backend web:8080", ing.Spec)
		}
		if ing.Labels[LabelManagedBy] != managedBy || ing.Labels[LabelGuestID] != s.ID || ing.Labels[LabelRoute] != "00000000000000a1" {
			t.Errorf("ingress labels = %v", ing.Labels)
		}
		// The same again writes nothing.
		rv := ing.ResourceVersion
		publish(d, routes)
		if got := ingress("route-00000000000000a1").ResourceVersion; got != rv {
			t.Errorf("an unchanged publish wrote the ingress (%s -> %s)", rv, got)
		}
	})

	t.Run("updated", func(t *testing.T) {
		moved := append([]drivers.Route(nil), routes...)
		moved[0].Domain = "www.example.org"
		publish(d, moved)
		if h := ingress("route-00000000000000a1").Spec.Rules[0].Host; h != "www.example.org" {
			t.Errorf("host after the route changed = %s, want www.example.org", h)
		}
		publish(d, routes)
	})

	t.Run("drift repaired", func(t *testing.T) {
		ing := ingress("route-00000000000000a1")
		ing.Spec.Rules[0].Host = "evil.example.org"
		ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Port.Number = 9
		if _, err := ings.Update(e.ctx, ing, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		settleIngress(t, e, d, "route-00000000000000a1")
		publish(d, routes)
		ing = ingress("route-00000000000000a1")
		if ing.Spec.Rules[0].Host != "web.example.org" || ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Port.Number != 8080 {
			t.Errorf("hand edit not repaired: %+v", ing.Spec.Rules)
		}
		if err := ings.Delete(e.ctx, "route-00000000000000a1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		settleIngress(t, e, d, "route-00000000000000a1")
		publish(d, routes)
		ingress("route-00000000000000a1")
	})

	t.Run("others' ingresses untouched", func(t *testing.T) {
		// One without corpus's labels in the namespace, one with them in
		// another namespace.
		theirs := desiredIngress(e.d.Namespace(), "traefik", drivers.Route{ID: "theirs", Domain: "theirs.example.org", Guest: "web", GuestID: s.ID}, 8080)
		theirs.Name = "theirs"
		delete(theirs.Labels, LabelManagedBy)
		if _, err := ings.Create(e.ctx, theirs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		foreign := desiredIngress("default", "traefik", routes[0], 8080)
		if _, err := e.client.NetworkingV1().Ingresses("default").Create(e.ctx, foreign, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		publish(d, nil) // no route: corpus's Ingresses go
		if _, err := ings.Get(e.ctx, "route-00000000000000a1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ingress of a removed route: %v, want not found", err)
		}
		if _, err := ings.Get(e.ctx, "theirs", metav1.GetOptions{}); err != nil {
			t.Errorf("an ingress not corpus's was touched: %v", err)
		}
		if _, err := e.client.NetworkingV1().Ingresses("default").Get(e.ctx, foreign.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("an ingress of another namespace was touched: %v", err)
		}
		all, err := e.client.NetworkingV1().Ingresses("").List(e.ctx, metav1.ListOptions{LabelSelector: managedSelector})
		if err != nil {
			t.Fatal(err)
		}
		for _, ing := range all.Items {
			if ing.Namespace != "default" {
				t.Errorf("corpus ingress %s/%s left", ing.Namespace, ing.Name)
			}
		}
	})

	t.Run("default class and guest removal", func(t *testing.T) {
		if _, err := e.client.NetworkingV1().IngressClasses().Create(e.ctx, &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{annotDefaultClass: "true"}},
			Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d2, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "ing"})
		if err != nil {
			t.Fatal(err)
		}
		defer d2.Close()
		publish(d2, routes)
		if ing := ingress("route-00000000000000a1"); *ing.Spec.IngressClassName != "nginx" {
			t.Errorf("class with a default among two = %s, want nginx", *ing.Spec.IngressClassName)
		}
		if err := d2.Destroy(e.ctx, "web"); err != nil {
			t.Fatal(err)
		}
		if _, err := ings.Get(e.ctx, "route-00000000000000a1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ingress of a destroyed guest: %v, want not found", err)
		}
		// Configured off: nothing is published.
		off, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "ing", IngressClass: NoIngress})
		if err != nil {
			t.Fatal(err)
		}
		defer off.Close()
		if class, _ := off.IngressClass(e.ctx); class != "" {
			t.Errorf("IngressClass with %q = %q, want none", NoIngress, class)
		}
	})
}

// settleIngress waits until d's view shows the server's copy of an
// Ingress (or its absence), after a test's own write around d.
func settleIngress(t *testing.T, e *env, d *Driver, name string) {
	t.Helper()
	v, err := d.view(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := e.client.NetworkingV1().Ingresses(e.d.Namespace()).Get(e.ctx, name, metav1.GetOptions{})
	rv := ""
	if err == nil {
		rv = cur.ResourceVersion
	}
	await(e.ctx, func() (*networkingv1.Ingress, error) { return v.ings.Get(name) }, rv)
}
