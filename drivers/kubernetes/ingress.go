package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// NoIngress as Config.IngressClass makes the driver publish no Ingress:
// the agent's proxy serves every route.
const NoIngress = "none"

const (
	// LabelRoute ties an Ingress to the corpus route it publishes.
	LabelRoute = "corpus.dev/route-id"
	// annotDefaultClass marks a cluster's default IngressClass.
	annotDefaultClass = "ingressclass.kubernetes.io/is-default-class"
	classTTL          = 10 * time.Second
)

// IngressClass is the class of the Ingress objects the driver makes for
// http routes: the configured one, else the cluster's default class, else
// its only class; "" when the cluster has none (or none may be read) and
// the agent's proxy serves the routes. A detected class is read again at
// most every classTTL.
func (d *Driver) IngressClass(ctx context.Context) (string, error) {
	switch d.cfg.IngressClass {
	case NoIngress:
		return "", nil
	case "":
	default:
		return d.cfg.IngressClass, nil
	}
	d.classMu.Lock()
	defer d.classMu.Unlock()
	if !d.classAt.IsZero() && time.Since(d.classAt) < classTTL {
		return d.classLast, nil
	}
	list, err := d.client.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		// The driver's credentials may not read classes: no Ingress.
		list, err = &networkingv1.IngressClassList{}, nil
	case err != nil:
		return "", fmt.Errorf("listing ingress classes: %w", err)
	}
	class := ""
	names := make([]string, 0, len(list.Items))
	for _, c := range list.Items {
		names = append(names, c.Name)
		if c.Annotations[annotDefaultClass] == "true" && class == "" {
			class = c.Name
		}
	}
	sort.Strings(names)
	if class == "" && len(names) == 1 {
		class = names[0]
	}
	if class != d.classLast || d.classAt.IsZero() {
		d.logger.Info("ingress class", "class", class, "classes", names)
	}
	d.classLast, d.classAt = class, time.Now()
	return class, nil
}

// PublishRoutes makes one Ingress per http route when the cluster has an
// IngressClass (see IngressClass): host the route's domain, backend the
// guest's Service at the port that targets the route's guest port. It
// repairs Ingresses edited or deleted by hand, and deletes the corpus
// Ingresses of the namespace that no route asks for (all of them when
// there is no class). tcp routes are never published: an Ingress is
// HTTP only, so the agent's proxy serves them. It returns the IDs of the
// routes an Ingress serves.
func (d *Driver) PublishRoutes(ctx context.Context, routes []drivers.Route) (map[string]bool, error) {
	class, err := d.IngressClass(ctx)
	if err != nil {
		return nil, err
	}
	v, err := d.view(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	want := map[string]*networkingv1.Ingress{}
	if class != "" {
		for _, r := range routes {
			if r.Kind != corpusv1.RouteHTTP {
				continue
			}
			name := ingressName(r.ID)
			if len(validation.IsDNS1123Label(name)) > 0 {
				errs = append(errs, fmt.Errorf("route id %q cannot name an ingress: %w", r.ID, drivers.ErrInvalidSpec))
				continue
			}
			port, err := v.servicePort(r.Guest, r.GuestID, r.GuestPort)
			if err != nil {
				errs = append(errs, fmt.Errorf("route %s: %w", r.Domain, err))
				continue
			}
			want[name] = desiredIngress(d.ns, class, r, port)
		}
	}
	served := map[string]bool{}
	for _, w := range want {
		if err := d.convergeIngress(ctx, v, w); err != nil {
			errs = append(errs, err)
			continue
		}
		served[w.Labels[LabelRoute]] = true
	}
	have, err := v.ings.List(labels.Everything())
	if err != nil {
		return served, errors.Join(append(errs, err)...)
	}
	for _, ing := range have {
		if _, ok := want[ing.Name]; ok || ing.Labels[LabelManagedBy] != managedBy {
			continue
		}
		err := d.client.NetworkingV1().Ingresses(d.ns).Delete(ctx, ing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ing.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting ingress %s: %w", ing.Name, err))
			continue
		}
		name := ing.Name
		await(ctx, func() (*networkingv1.Ingress, error) { return v.ings.Get(name) }, "")
		d.logger.Info("ingress deleted", "namespace", d.ns, "ingress", name, "host", ingressHost(ing))
	}
	return served, errors.Join(errs...)
}

func ingressName(routeID string) string { return "route-" + routeID }

func ingressHost(ing *networkingv1.Ingress) string {
	if len(ing.Spec.Rules) == 0 {
		return ""
	}
	return ing.Spec.Rules[0].Host
}

// servicePort is the port of guest name's Service that targets guestPort.
func (v *view) servicePort(name, id string, guestPort int) (int32, error) {
	svc, err := v.svcs.Get(name)
	if apierrors.IsNotFound(err) || err == nil && svc.Labels[LabelGuestID] != id {
		return 0, fmt.Errorf("guest %s has no service (it publishes no port): %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.IntValue() == guestPort && p.Protocol == corev1.ProtocolTCP {
			return p.Port, nil
		}
	}
	return 0, fmt.Errorf("guest %s publishes no tcp port %d; add it with corpus guest update %s --port: %w", name, guestPort, name, drivers.ErrNotFound)
}

// desiredIngress is the Ingress of http route r, to the guest's Service
// port.
func desiredIngress(ns, class string, r drivers.Route, port int32) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ingressName(r.ID), Namespace: ns,
			Labels: map[string]string{LabelManagedBy: managedBy, LabelGuestID: r.GuestID, LabelGuest: r.Guest, LabelRoute: r.ID},
		},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			Rules: []networkingv1.IngressRule{{
				Host: r.Domain,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path: "/", PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: r.Guest, Port: networkingv1.ServiceBackendPort{Number: port},
						}},
					}},
				}},
			}},
		},
	}
}

// convergeIngress makes want, or writes it back over an Ingress of the
// same route that differs in what corpus sets. An Ingress of that name
// that is not corpus's, or is another route's, is left alone and
// refused with drivers.ErrExists.
func (d *Driver) convergeIngress(ctx context.Context, v *view, want *networkingv1.Ingress) error {
	api := d.client.NetworkingV1().Ingresses(d.ns)
	name := want.Name
	cur, err := v.ings.Get(name)
	if apierrors.IsNotFound(err) {
		ing, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			await(ctx, func() (*networkingv1.Ingress, error) { return v.ings.Get(name) }, ing.ResourceVersion)
			d.logger.Info("ingress created", "namespace", d.ns, "ingress", name, "host", ingressHost(want), "guest", want.Labels[LabelGuest])
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return d.writeErr("creating ingress", name, err)
		}
		if cur, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading ingress %s: %w", name, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading ingress %s: %w", name, err)
	}
	if cur.Labels[LabelManagedBy] != managedBy || cur.Labels[LabelRoute] != want.Labels[LabelRoute] {
		return fmt.Errorf("ingress %s/%s is not corpus's route %s: %w", d.ns, name, want.Labels[LabelRoute], drivers.ErrExists)
	}
	if equality.Semantic.DeepDerivative(want.Labels, cur.Labels) &&
		cur.Spec.IngressClassName != nil && *cur.Spec.IngressClassName == *want.Spec.IngressClassName &&
		cur.Spec.DefaultBackend == nil && len(cur.Spec.TLS) == 0 &&
		len(cur.Spec.Rules) == 1 && cur.Spec.Rules[0].HTTP != nil && len(cur.Spec.Rules[0].HTTP.Paths) == 1 &&
		equality.Semantic.DeepEqual(want.Spec.Rules, cur.Spec.Rules) {
		return nil
	}
	next := cur.DeepCopy()
	next.Labels = merged(cur.Labels, want.Labels)
	next.Spec = want.Spec
	ing, err := api.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		// A conflict (the view was behind) is redone on the next pass.
		return d.writeErr("updating ingress", name, err)
	}
	await(ctx, func() (*networkingv1.Ingress, error) { return v.ings.Get(name) }, ing.ResourceVersion)
	d.logger.Info("ingress converged", "namespace", d.ns, "ingress", name, "host", ingressHost(want))
	return nil
}

// RouteTarget is where the agent's proxy reaches guest name's port
// guestPort: the guest's Service, at its cluster IP and the Service port
// that targets guestPort (kube-proxy makes it reachable on the cluster's
// hosts). A guest without such a Service port returns ErrNotFound.
func (d *Driver) RouteTarget(ctx context.Context, name string, guestPort int) (string, error) {
	v, err := d.view(ctx)
	if err != nil {
		return "", err
	}
	svc, err := v.svcs.Get(name)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("guest %s has no service (it publishes no port): %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone {
		return "", fmt.Errorf("service %s/%s has no cluster IP", d.ns, name)
	}
	port, err := v.servicePort(name, svc.Labels[LabelGuestID], guestPort)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(port))), nil
}
