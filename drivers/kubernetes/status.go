package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"corpus/drivers"
)

// Inspect returns the guest's state as the cluster shows it: the
// Deployment's replica count and image, its pods' readiness, and the
// newest pod's phase and reason.
//
// A guest whose Deployment is gone but whose Service is left is
// reported stopped, so the caller can tell it apart from no guest at all
// (and either converge it or remove it); no object at all is ErrNotFound.
func (d *Driver) Inspect(ctx context.Context, name string) (drivers.GuestStatus, error) {
	w, err := d.workload(ctx, name)
	if errors.Is(err, drivers.ErrNotFound) {
		ids, lerr := d.guestIDs(ctx, name)
		if lerr != nil || len(ids) == 0 {
			return drivers.GuestStatus{}, errors.Join(err, lerr)
		}
		return drivers.GuestStatus{ID: ids[0], Name: name, State: drivers.StateStopped, Message: "deployment missing"}, nil
	}
	if err != nil {
		return drivers.GuestStatus{}, err
	}
	pods, err := d.pods(ctx, w.meta.Labels[LabelGuestID])
	if err != nil {
		return drivers.GuestStatus{}, err
	}
	return status(w, pods), nil
}

// status derives a guest's state from its Deployment and pods:
//
//	replicas 0, no pods       stopped
//	replicas 0, pods left     stopping
//	replicas 1, a ready pod   running
//	replicas 1, none ready    starting
func status(w *workload, pods []corev1.Pod) drivers.GuestStatus {
	st := drivers.GuestStatus{
		ID:    w.meta.Labels[LabelGuestID],
		Name:  w.meta.Name,
		Image: w.meta.Annotations[AnnotImage],
	}
	if cs := w.template.Spec.Containers; len(cs) > 0 {
		st.Image = cs[0].Image
		st.MemoryBytes = cs[0].Resources.Limits.Memory().Value()
		st.CPUMillis = cs[0].Resources.Limits.Cpu().MilliValue()
	}
	want := int32(1)
	if w.replicas != nil {
		want = *w.replicas
	}
	ready := 0
	for _, p := range pods {
		if podReady(p) {
			ready++
		}
	}
	switch {
	case want == 0 && len(pods) == 0:
		st.State = drivers.StateStopped
	case want == 0:
		st.State = drivers.StateStopping
	case ready > 0:
		st.State = drivers.StateRunning
	default:
		st.State = drivers.StateStarting
	}
	msg := fmt.Sprintf("%d/%d ready", ready, want)
	if len(pods) > 0 { // a ready pod if there is one, else the newest
		p := pods[0]
		msg += fmt.Sprintf("; pod %s %s", p.Name, p.Status.Phase)
		if r := podReason(p); r != "" {
			msg += ": " + r
		}
		st.Address = p.Status.PodIP
	}
	st.Message = msg
	return st
}

func podReady(p corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podReason is why a pod is not (yet) what it should be: the pod's own
// reason, a waiting or terminated container's reason, or an unmet
// condition's.
func podReason(p corev1.Pod) string {
	var out []string
	if p.Status.Reason != "" {
		out = append(out, p.Status.Reason)
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			out = append(out, c.State.Waiting.Reason)
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			out = append(out, c.State.Terminated.Reason)
		}
	}
	if len(out) == 0 {
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Reason != "" {
				out = append(out, c.Reason)
				break
			}
		}
	}
	return strings.Join(out, ", ")
}

// List returns every corpus guest with objects in the driver's
// namespace: those with a Deployment, with their observed state, and
// those left with only a Service, as stopped, so the agent removes them
// when they are not desired. Claims are volumes, not guests: not listed.
func (d *Driver) List(ctx context.Context) ([]drivers.GuestStatus, error) {
	v, err := d.view(ctx)
	if err != nil {
		return nil, err
	}
	all := labels.Everything()
	ws, err := v.allWorkloads()
	if err != nil {
		return nil, err
	}
	pods, err := v.pods.List(all)
	if err != nil {
		return nil, err
	}
	byID := map[string][]corev1.Pod{}
	for _, p := range pods {
		id := p.Labels[LabelGuestID]
		byID[id] = append(byID[id], *p)
	}
	seen := map[string]bool{}
	var out []drivers.GuestStatus
	for _, w := range ws {
		id := w.meta.Labels[LabelGuestID]
		if id == "" || seen[id] {
			continue
		}
		ps := byID[id]
		sortPods(ps)
		seen[id] = true
		out = append(out, status(w, ps))
	}
	leftover := func(meta metav1.ObjectMeta) {
		id := meta.Labels[LabelGuestID]
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		out = append(out, drivers.GuestStatus{ID: id, Name: meta.Labels[LabelGuest], State: drivers.StateStopped, Message: "deployment missing"})
	}
	svcs, err := v.svcs.List(all)
	if err != nil {
		return nil, err
	}
	for _, s := range svcs {
		leftover(s.ObjectMeta)
	}
	return out, nil
}
