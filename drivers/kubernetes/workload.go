package kubernetes

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"corpus/drivers"
)

// Kinds of guest workloads: a Deployment for a guest without a volume, a
// StatefulSet for one with a volume.
const (
	kindDeployment  = "Deployment"
	kindStatefulSet = "StatefulSet"
)

// workload is what the driver reads of a guest's Deployment or
// StatefulSet. Its fields point into the view's object: read only.
type workload struct {
	kind     string
	meta     *metav1.ObjectMeta
	replicas *int32
	template *corev1.PodTemplateSpec
}

func deploymentWorkload(d *appsv1.Deployment) *workload {
	return &workload{kind: kindDeployment, meta: &d.ObjectMeta, replicas: d.Spec.Replicas, template: &d.Spec.Template}
}

func statefulSetWorkload(s *appsv1.StatefulSet) *workload {
	return &workload{kind: kindStatefulSet, meta: &s.ObjectMeta, replicas: s.Spec.Replicas, template: &s.Spec.Template}
}

// workloadKind is the kind of workload spec asks for.
func workloadKind(spec drivers.GuestSpec) string {
	if spec.Volume != nil {
		return kindStatefulSet
	}
	return kindDeployment
}

// workload reads the guest's Deployment or StatefulSet, or returns
// ErrNotFound when corpus manages neither. Read only.
func (d *Driver) workload(ctx context.Context, name string) (*workload, error) {
	v, err := d.view(ctx)
	if err != nil {
		return nil, err
	}
	dep, err := v.deps.Get(name)
	if err == nil {
		return deploymentWorkload(dep), nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading deployment %s: %w", name, err)
	}
	set, err := v.sets.Get(name)
	if err == nil {
		return statefulSetWorkload(set), nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading statefulset %s: %w", name, err)
	}
	return nil, fmt.Errorf("deployment or statefulset %s/%s: %w", d.ns, name, drivers.ErrNotFound)
}

// allWorkloads are the view's Deployments and StatefulSets.
func (v *view) allWorkloads() ([]*workload, error) {
	deps, err := v.deps.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sets, err := v.sets.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*workload, 0, len(deps)+len(sets))
	for _, o := range deps {
		out = append(out, deploymentWorkload(o))
	}
	for _, o := range sets {
		out = append(out, statefulSetWorkload(o))
	}
	return out, nil
}

// removeOtherKind deletes the guest's workload of the kind spec does not
// ask for (a guest that gained or lost its volume) and waits until the
// view shows it gone, so the new workload's pod is the claim's only user.
func (d *Driver) removeOtherKind(ctx context.Context, v *view, spec drivers.GuestSpec) error {
	bg := metav1.DeletePropagationBackground
	var (
		meta *metav1.ObjectMeta
		del  func() error
		gone func() bool
		kind string
	)
	switch workloadKind(spec) {
	case kindStatefulSet:
		dep, err := v.deps.Get(spec.Name)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		meta, kind = &dep.ObjectMeta, "deployment"
		del = func() error {
			return d.client.AppsV1().Deployments(d.ns).Delete(ctx, spec.Name, metav1.DeleteOptions{
				PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &dep.UID}})
		}
		gone = func() bool { _, err := v.deps.Get(spec.Name); return apierrors.IsNotFound(err) }
	default:
		set, err := v.sets.Get(spec.Name)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		meta, kind = &set.ObjectMeta, "statefulset"
		del = func() error {
			return d.client.AppsV1().StatefulSets(d.ns).Delete(ctx, spec.Name, metav1.DeleteOptions{
				PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &set.UID}})
		}
		gone = func() bool { _, err := v.sets.Get(spec.Name); return apierrors.IsNotFound(err) }
	}
	if err := owned(kind, *meta, spec.ID); err != nil {
		return err
	}
	if err := del(); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s: %w", kind, spec.Name, err)
	}
	// The old kind's pods go with it (a cluster's garbage collector does
	// that; without one, corpus does). The new workload is made after
	// this, so every pod of the guest now is the old kind's.
	zero := int64(0)
	if err := d.client.CoreV1().Pods(d.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: guestSelector(spec.ID)}); err != nil {
		return fmt.Errorf("deleting the pods of %s %s: %w", kind, spec.Name, err)
	}
	until(ctx, gone)
	d.logger.Info("workload of the other kind removed", "guest", spec.Name, "namespace", d.ns, "kind", kind)
	return nil
}
