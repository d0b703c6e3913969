package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"corpus/drivers"
)

// Create makes the guest's objects, stopped (no replicas), or converges
// those of an existing guest with the same ID to spec: a changed image,
// limit, env or port list, and any hand edit of a field corpus sets, is
// written back; a deleted Service or claim is made again. The run state
// (replicas 0 or 1) of an existing guest is kept, except that more than
// one replica is scaled back to one. A guest with a volume runs as a
// StatefulSet, one without as a Deployment; a guest that gained or lost
// its volume has its workload of the other kind deleted, and the new
// one made stopped (the caller starts it). A spec the cluster would refuse
// returns drivers.ErrInvalidSpec before anything is written; objects of
// that name belonging to another guest, or to no corpus guest, return
// drivers.ErrExists.
func (d *Driver) Create(ctx context.Context, spec drivers.GuestSpec, progress drivers.ProgressFunc) error {
	if err := validate(spec); err != nil {
		return err
	}
	if err := d.ensureNamespace(ctx); err != nil {
		return err
	}
	v, err := d.view(ctx)
	if err != nil {
		return err
	}
	// A guest that gained or lost its volume changes kind: the old
	// workload goes first.
	if err := d.removeOtherKind(ctx, v, spec); err != nil {
		return err
	}
	if err := d.convergeClaim(ctx, v, spec); err != nil {
		return err
	}
	pull, err := d.convergePullSecret(ctx, spec.Image, progress)
	if err != nil {
		return err
	}
	var w *workload
	if workloadKind(spec) == kindStatefulSet {
		set, err := d.convergeStatefulSet(ctx, v, spec, pull, progress)
		if err != nil {
			return err
		}
		w = statefulSetWorkload(set)
	} else {
		dep, err := d.convergeDeployment(ctx, v, spec, pull, progress)
		if err != nil {
			return err
		}
		w = deploymentWorkload(dep)
	}
	return d.convergeService(ctx, v, spec, w)
}

// owned reports whether meta belongs to the guest with id, and returns
// drivers.ErrExists when it belongs to another guest or is not corpus's.
func owned(kind string, meta metav1.ObjectMeta, id string) error {
	if meta.Labels[LabelManagedBy] != managedBy {
		return fmt.Errorf("%s %s/%s is not managed by corpus: %w", kind, meta.Namespace, meta.Name, drivers.ErrExists)
	}
	if got := meta.Labels[LabelGuestID]; got != id {
		return fmt.Errorf("%s %s/%s belongs to guest id %s: %w", kind, meta.Namespace, meta.Name, got, drivers.ErrExists)
	}
	return nil
}

func (d *Driver) convergeDeployment(ctx context.Context, v *view, spec drivers.GuestSpec, pull string, progress drivers.ProgressFunc) (*appsv1.Deployment, error) {
	api := d.client.AppsV1().Deployments(d.ns)
	cur, err := v.deps.Get(spec.Name)
	if apierrors.IsNotFound(err) {
		want := desiredDeployment(d.ns, spec, 0, pull)
		if progress != nil {
			progress("creating deployment " + d.ns + "/" + spec.Name)
		}
		dep, err := api.Create(ctx, want, metav1.CreateOptions{})
		switch {
		case err == nil:
			await(ctx, func() (*appsv1.Deployment, error) { return v.deps.Get(spec.Name) }, dep.ResourceVersion)
			d.logger.Info("deployment created", "guest", spec.Name, "namespace", d.ns, "image", spec.Image)
			return dep, nil
		case apierrors.IsAlreadyExists(err):
			// Not corpus's, or not in the view yet: read the server.
			if cur, err = api.Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("reading deployment %s: %w", spec.Name, err)
			}
		case apierrors.IsNotFound(err):
			d.nsReady.Store(false) // the namespace went away; the next pass makes it
			return nil, d.writeErr("creating deployment", spec.Name, err)
		default:
			return nil, d.writeErr("creating deployment", spec.Name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading deployment %s: %w", spec.Name, err)
	}
	for attempt := 0; ; attempt++ {
		if err := owned("deployment", cur.ObjectMeta, spec.ID); err != nil {
			return nil, err
		}
		replicas := int32(1)
		if cur.Spec.Replicas != nil && *cur.Spec.Replicas == 0 {
			replicas = 0
		}
		want := desiredDeployment(d.ns, spec, replicas, pull)
		if !deploymentDrifted(cur, want) {
			return cur, nil
		}
		next := cur.DeepCopy()
		next.Labels = merged(cur.Labels, want.Labels)
		next.Annotations = merged(cur.Annotations, want.Annotations)
		next.OwnerReferences = nil
		next.Spec = want.Spec
		if progress != nil {
			progress("updating deployment " + d.ns + "/" + spec.Name)
		}
		dep, err := api.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt == 0 {
			// The view was behind: compare with the server's copy.
			if cur, err = api.Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("reading deployment %s: %w", spec.Name, err)
			}
			continue
		}
		if err != nil {
			return nil, d.writeErr("updating deployment", spec.Name, err)
		}
		await(ctx, func() (*appsv1.Deployment, error) { return v.deps.Get(spec.Name) }, dep.ResourceVersion)
		d.logger.Info("deployment converged", "guest", spec.Name, "namespace", d.ns, "image", spec.Image)
		return dep, nil
	}
}

// deploymentDrifted reports whether cur differs from want in anything
// corpus sets: the spec it was made from, the labels, the replica count
// and every field of the pod template corpus fills in.
func deploymentDrifted(cur, want *appsv1.Deployment) bool {
	return cur.Spec.Paused ||
		!equality.Semantic.DeepDerivative(want.Spec.Selector, cur.Spec.Selector) ||
		workloadDrifted(deploymentWorkload(cur), deploymentWorkload(want))
}

// workloadDrifted compares what the two kinds share.
func workloadDrifted(cur, want *workload) bool {
	ct, wt := cur.template.Spec.Containers, want.template.Spec.Containers
	switch {
	case cur.meta.Annotations[AnnotSpecHash] != want.meta.Annotations[AnnotSpecHash],
		!equality.Semantic.DeepDerivative(want.meta.Labels, cur.meta.Labels),
		cur.replicas == nil || *cur.replicas != *want.replicas,
		len(ct) != len(wt),
		len(ct[0].Env) != len(wt[0].Env),
		len(ct[0].Ports) != len(wt[0].Ports),
		len(cur.template.Spec.Volumes) != len(want.template.Spec.Volumes),
		len(cur.template.Spec.ImagePullSecrets) != len(want.template.Spec.ImagePullSecrets),
		!equality.Semantic.DeepDerivative(*want.template, *cur.template),
		!equality.Semantic.DeepEqual(wt[0].Resources, ct[0].Resources):
		return true
	}
	return false
}

// convergeStatefulSet is convergeDeployment for a guest with a volume.
// A StatefulSet's selector and service name cannot change; corpus sets
// them from the guest's id and name, which do not change either.
func (d *Driver) convergeStatefulSet(ctx context.Context, v *view, spec drivers.GuestSpec, pull string, progress drivers.ProgressFunc) (*appsv1.StatefulSet, error) {
	api := d.client.AppsV1().StatefulSets(d.ns)
	cur, err := v.sets.Get(spec.Name)
	if apierrors.IsNotFound(err) {
		want := desiredStatefulSet(d.ns, spec, 0, pull)
		if progress != nil {
			progress("creating statefulset " + d.ns + "/" + spec.Name)
		}
		set, err := api.Create(ctx, want, metav1.CreateOptions{})
		switch {
		case err == nil:
			await(ctx, func() (*appsv1.StatefulSet, error) { return v.sets.Get(spec.Name) }, set.ResourceVersion)
			d.logger.Info("statefulset created", "guest", spec.Name, "namespace", d.ns, "image", spec.Image)
			return set, nil
		case apierrors.IsAlreadyExists(err):
			if cur, err = api.Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("reading statefulset %s: %w", spec.Name, err)
			}
		case apierrors.IsNotFound(err):
			d.nsReady.Store(false)
			return nil, d.writeErr("creating statefulset", spec.Name, err)
		default:
			return nil, d.writeErr("creating statefulset", spec.Name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading statefulset %s: %w", spec.Name, err)
	}
	for attempt := 0; ; attempt++ {
		if err := owned("statefulset", cur.ObjectMeta, spec.ID); err != nil {
			return nil, err
		}
		replicas := int32(1)
		if cur.Spec.Replicas != nil && *cur.Spec.Replicas == 0 {
			replicas = 0
		}
		want := desiredStatefulSet(d.ns, spec, replicas, pull)
		if !workloadDrifted(statefulSetWorkload(cur), statefulSetWorkload(want)) &&
			equality.Semantic.DeepDerivative(want.Spec.Selector, cur.Spec.Selector) {
			return cur, nil
		}
		next := cur.DeepCopy()
		next.Labels = merged(cur.Labels, want.Labels)
		next.Annotations = merged(cur.Annotations, want.Annotations)
		next.OwnerReferences = nil
		next.Spec.Replicas = want.Spec.Replicas
		next.Spec.Template = want.Spec.Template
		if progress != nil {
			progress("updating statefulset " + d.ns + "/" + spec.Name)
		}
		set, err := api.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt == 0 {
			if cur, err = api.Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("reading statefulset %s: %w", spec.Name, err)
			}
			continue
		}
		if err != nil {
			return nil, d.writeErr("updating statefulset", spec.Name, err)
		}
		await(ctx, func() (*appsv1.StatefulSet, error) { return v.sets.Get(spec.Name) }, set.ResourceVersion)
		d.logger.Info("statefulset converged", "guest", spec.Name, "namespace", d.ns, "image", spec.Image)
		return set, nil
	}
}

func (d *Driver) convergeService(ctx context.Context, v *view, spec drivers.GuestSpec, owner *workload) error {
	api := d.client.CoreV1().Services(d.ns)
	want := desiredService(d.ns, spec)
	cur, err := v.svcs.Get(spec.Name)
	switch {
	case apierrors.IsNotFound(err) && want == nil:
		return nil
	case apierrors.IsNotFound(err):
		want.OwnerReferences = ownedBy(owner)
		svc, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			await(ctx, func() (*corev1.Service, error) { return v.svcs.Get(spec.Name) }, svc.ResourceVersion)
			d.logger.Info("service created", "guest", spec.Name, "namespace", d.ns)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return d.writeErr("creating service", spec.Name, err)
		}
		// Not corpus's, or not in the view yet: read the server.
		if cur, err = api.Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading service %s: %w", spec.Name, err)
		}
	case err != nil:
		return fmt.Errorf("reading service %s: %w", spec.Name, err)
	}
	if err := owned("service", cur.ObjectMeta, spec.ID); err != nil {
		return err
	}
	if want == nil {
		// The guest publishes no port any more.
		err := api.Delete(ctx, spec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting service %s: %w", spec.Name, err)
		}
		await(ctx, func() (*corev1.Service, error) { return v.svcs.Get(spec.Name) }, "")
		return nil
	}
	if cur.Annotations[AnnotSpecHash] == want.Annotations[AnnotSpecHash] &&
		equality.Semantic.DeepDerivative(want.Labels, cur.Labels) &&
		equality.Semantic.DeepEqual(want.Spec.Selector, cur.Spec.Selector) &&
		cur.Spec.Type == want.Spec.Type && len(cur.Spec.Ports) == len(want.Spec.Ports) &&
		equality.Semantic.DeepDerivative(want.Spec.Ports, cur.Spec.Ports) &&
		equality.Semantic.DeepEqual(ownedBy(owner), cur.OwnerReferences) {
		return nil
	}
	next := cur.DeepCopy()
	next.Labels = merged(cur.Labels, want.Labels)
	next.Annotations = merged(cur.Annotations, want.Annotations)
	next.OwnerReferences = ownedBy(owner)
	next.Spec.Type = want.Spec.Type
	next.Spec.Selector = want.Spec.Selector
	next.Spec.Ports = want.Spec.Ports
	svc, err := api.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		// A conflict (the view was behind) is redone on the next pass.
		return d.writeErr("updating service", spec.Name, err)
	}
	await(ctx, func() (*corev1.Service, error) { return v.svcs.Get(spec.Name) }, svc.ResourceVersion)
	d.logger.Info("service converged", "guest", spec.Name, "namespace", d.ns)
	return nil
}

// writeErr wraps a refused write; a refusal by validation (the spec
// itself is wrong) becomes drivers.ErrInvalidSpec.
func (d *Driver) writeErr(op, name string, err error) error {
	if apierrors.IsInvalid(err) {
		return fmt.Errorf("%s %s/%s: %w: %v", op, d.ns, name, drivers.ErrInvalidSpec, err)
	}
	return fmt.Errorf("%s %s/%s: %w", op, d.ns, name, err)
}

// merged returns base with over's entries set.
func merged(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// Start scales the guest's Deployment or StatefulSet to one replica.
func (d *Driver) Start(ctx context.Context, name string) error {
	return d.scale(ctx, name, 1)
}

// Stop scales the guest's workload to zero and waits up to timeout for
// its pods to end; pods still there then are deleted without grace.
func (d *Driver) Stop(ctx context.Context, name string, timeout time.Duration) error {
	if err := d.scale(ctx, name, 0); err != nil {
		return err
	}
	w, err := d.workload(ctx, name)
	if err != nil {
		return err
	}
	id := w.meta.Labels[LabelGuestID]
	deadline := time.Now().Add(timeout)
	for {
		pods, err := d.pods(ctx, id)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			zero := int64(0)
			err := d.client.CoreV1().Pods(d.ns).DeleteCollection(ctx,
				metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: guestSelector(id)})
			if err != nil {
				return fmt.Errorf("deleting the pods of %s: %w", name, err)
			}
			if v, err := d.view(ctx); err == nil {
				until(ctx, func() bool { pods, _ := v.guestPods(id); return len(pods) == 0 })
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (d *Driver) scale(ctx context.Context, name string, replicas int32) error {
	w, err := d.workload(ctx, name)
	if err != nil {
		return err
	}
	if w.replicas != nil && *w.replicas == replicas {
		return nil
	}
	v, err := d.view(ctx)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if w.kind == kindStatefulSet {
		set, err := d.client.AppsV1().StatefulSets(d.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("scaling statefulset %s to %d: %w", name, replicas, err)
		}
		await(ctx, func() (*appsv1.StatefulSet, error) { return v.sets.Get(name) }, set.ResourceVersion)
		return nil
	}
	dep, err := d.client.AppsV1().Deployments(d.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("scaling deployment %s to %d: %w", name, replicas, err)
	}
	await(ctx, func() (*appsv1.Deployment, error) { return v.deps.Get(name) }, dep.ResourceVersion)
	return nil
}

// Destroy deletes every object of the guest named name in the driver's
// namespace: the Deployment or StatefulSet, its Service, the Ingresses
// of its routes and its pods. The objects are
// found by the guest's id label, so a leftover Service of a guest whose
// Deployment is gone is removed too. The claim of its volume stays: a
// volume outlives its guest.
func (d *Driver) Destroy(ctx context.Context, name string) error {
	ids, err := d.guestIDs(ctx, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, d.destroyID(ctx, id))
	}
	return errors.Join(errs...)
}

// guestIDs are the ids of the corpus guests named name that have objects
// in the namespace (normally at most one).
func (d *Driver) guestIDs(ctx context.Context, name string) ([]string, error) {
	v, err := d.view(ctx)
	if err != nil {
		return nil, err
	}
	sel := selector(map[string]string{LabelGuest: name})
	seen := map[string]bool{}
	var ids []string
	add := func(meta metav1.ObjectMeta) {
		if id := meta.Labels[LabelGuestID]; id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	deps, err := v.deps.List(sel)
	if err != nil {
		return nil, err
	}
	for _, o := range deps {
		add(o.ObjectMeta)
	}
	sets, err := v.sets.List(sel)
	if err != nil {
		return nil, err
	}
	for _, o := range sets {
		add(o.ObjectMeta)
	}
	svcs, err := v.svcs.List(sel)
	if err != nil {
		return nil, err
	}
	for _, o := range svcs {
		add(o.ObjectMeta)
	}
	return ids, nil
}

func (d *Driver) destroyID(ctx context.Context, id string) error {
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	sel := metav1.ListOptions{LabelSelector: guestSelector(id)}
	// Services have no DeleteCollection: delete them one by one.
	svcs, err := d.client.CoreV1().Services(d.ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("listing services of guest %s: %w", id, err)
	}
	for _, s := range svcs.Items {
		if err := d.client.CoreV1().Services(d.ns).Delete(ctx, s.Name, del); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting service %s: %w", s.Name, err)
		}
	}
	// Ingresses of the guest's routes go with it; a route still wanted
	// is published again once the guest is back.
	if err := d.client.NetworkingV1().Ingresses(d.ns).DeleteCollection(ctx, del, sel); err != nil {
		return fmt.Errorf("deleting ingresses of guest %s: %w", id, err)
	}
	if err := d.client.AppsV1().Deployments(d.ns).DeleteCollection(ctx, del, sel); err != nil {
		return fmt.Errorf("deleting deployments of guest %s: %w", id, err)
	}
	if err := d.client.AppsV1().StatefulSets(d.ns).DeleteCollection(ctx, del, sel); err != nil {
		return fmt.Errorf("deleting statefulsets of guest %s: %w", id, err)
	}
	if err := d.client.AppsV1().ReplicaSets(d.ns).DeleteCollection(ctx, del, sel); err != nil {
		return fmt.Errorf("deleting replica sets of guest %s: %w", id, err)
	}
	zero := int64(0)
	if err := d.client.CoreV1().Pods(d.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel); err != nil {
		return fmt.Errorf("deleting pods of guest %s: %w", id, err)
	}
	if v, err := d.view(ctx); err == nil {
		until(ctx, func() bool { return v.gone(id) })
	}
	return nil
}

// pods are the guest's pods in sortPods order.
func (d *Driver) pods(ctx context.Context, id string) ([]corev1.Pod, error) {
	v, err := d.view(ctx)
	if err != nil {
		return nil, err
	}
	return v.guestPods(id)
}

// sortPods puts ready pods first, then the newest (creation times have a
// resolution of seconds), then by name.
func sortPods(pods []corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if ra, rb := podReady(a), podReady(b); ra != rb {
			return ra
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.After(b.CreationTimestamp.Time)
		}
		return a.Name < b.Name
	})
}

// convergeClaim makes the PersistentVolumeClaim of the guest's volume,
// or binds an existing one of that volume (left by a previous guest) to
// this guest, or grows it to the volume's size. Growing needs a storage class that allows volume
// expansion; without one the refusal says so and the claim is unchanged.
// A smaller size than the claim's is refused with ErrCannotShrink.
func (d *Driver) convergeClaim(ctx context.Context, v *view, spec drivers.GuestSpec) error {
	want := desiredClaim(d.ns, d.cfg.StorageClass, spec)
	if want == nil {
		return nil
	}
	api := d.client.CoreV1().PersistentVolumeClaims(d.ns)
	name := want.Name
	cur, err := v.claims.Get(name)
	if apierrors.IsNotFound(err) {
		c, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			await(ctx, func() (*corev1.PersistentVolumeClaim, error) { return v.claims.Get(name) }, c.ResourceVersion)
			d.logger.Info("claim created", "guest", spec.Name, "namespace", d.ns, "volume", name, "bytes", spec.Volume.SizeBytes)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return d.writeErr("creating claim", name, err)
		}
		// Not corpus's, or not in the view yet: read the server.
		if cur, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading claim %s: %w", name, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading claim %s: %w", name, err)
	}
	// A volume outlives its guests: a claim of the volume is this
	// guest's whichever guest made it; one not corpus's is refused.
	if cur.Labels[LabelManagedBy] != managedBy || cur.Labels[LabelVolume] != name {
		return fmt.Errorf("claim %s/%s is not corpus's volume %s: %w", d.ns, name, name, drivers.ErrExists)
	}
	if cur.Labels[LabelGuestID] != spec.ID {
		next := cur.DeepCopy()
		next.Labels = merged(cur.Labels, want.Labels)
		if cur, err = api.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return d.writeErr("binding claim", name, err)
		}
		d.logger.Info("claim bound", "guest", spec.Name, "namespace", d.ns, "volume", name)
	}
	have := cur.Spec.Resources.Requests[corev1.ResourceStorage]
	size := want.Spec.Resources.Requests[corev1.ResourceStorage]
	switch have.Cmp(size) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("claim %s holds %s, asked %s: %w (%w)", name, have.String(), size.String(), ErrCannotShrink, drivers.ErrInvalidSpec)
	}
	if err := d.expandable(ctx, cur); err != nil {
		return err
	}
	if cur.Status.Phase != corev1.ClaimBound {
		return fmt.Errorf("claim %s is %s; it grows to %s once bound", name, cur.Status.Phase, size.String())
	}
	next := cur.DeepCopy()
	next.Spec.Resources.Requests[corev1.ResourceStorage] = size
	c, err := api.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return d.writeErr("expanding claim", name, err)
	}
	await(ctx, func() (*corev1.PersistentVolumeClaim, error) { return v.claims.Get(name) }, c.ResourceVersion)
	d.logger.Info("claim expanding", "guest", spec.Name, "namespace", d.ns, "from", have.String(), "to", size.String())
	return nil
}

// expandable returns nil when the claim's storage class allows volume
// expansion, else an error wrapping ErrNotExpandable.
func (d *Driver) expandable(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName == "" {
		return fmt.Errorf("claim %s has no storage class: %w (%w)", c.Name, ErrNotExpandable, drivers.ErrInvalidSpec)
	}
	sc, err := d.client.StorageV1().StorageClasses().Get(ctx, *c.Spec.StorageClassName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading storage class %s: %w", *c.Spec.StorageClassName, err)
	}
	if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
		return fmt.Errorf("storage class %s of claim %s: %w (%w)", sc.Name, c.Name, ErrNotExpandable, drivers.ErrInvalidSpec)
	}
	return nil
}
