package kubernetes

import (
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/drivers"
)

func (e *env) statefulSetIn(ns, name string) *appsv1.StatefulSet {
	e.t.Helper()
	set, err := e.client.AppsV1().StatefulSets(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("reading statefulset %s/%s: %v", ns, name, err)
	}
	return set
}

// simulateReadySetPod makes the pod a StatefulSet controller and a
// kubelet would (simulated: neither runs here): <name>-0, of the set's
// template, running and ready.
func (e *env) simulateReadySetPod(set *appsv1.StatefulSet) {
	e.t.Helper()
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: set.Name + "-0", Namespace: set.Namespace, Labels: set.Spec.Template.Labels},
		Spec:       *set.Spec.Template.Spec.DeepCopy(),
	}
	pod, err := e.client.CoreV1().Pods(set.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("simulated pod: %v", err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	if _, err := e.client.CoreV1().Pods(set.Namespace).UpdateStatus(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("simulated pod status: %v", err)
	}
	e.settle()
}

// testStatefulSet: a guest with a volume runs as a StatefulSet whose pod
// mounts corpus's claim by name; it updates, repairs and stops like a
// Deployment guest, and a guest that gains or loses its volume changes
// kind with the other kind removed.
func testStatefulSet(t *testing.T, e *env) {
	s := spec("5e5e000000000001", "db")
	s.Volume = &drivers.Volume{Name: "db", SizeBytes: 1 << 30, Path: "/var/lib/db"}
	e.create(s)
	ns := e.d.Namespace()
	set := e.statefulSetIn(ns, "db")
	if *set.Spec.Replicas != 0 || set.Spec.ServiceName != "db" || len(set.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("statefulset = replicas %d, service %q, %d claim templates; want 0, db, none", *set.Spec.Replicas, set.Spec.ServiceName, len(set.Spec.VolumeClaimTemplates))
	}
	vols, mounts := set.Spec.Template.Spec.Volumes, set.Spec.Template.Spec.Containers[0].VolumeMounts
	if len(vols) != 1 || vols[0].PersistentVolumeClaim == nil || vols[0].PersistentVolumeClaim.ClaimName != "db" ||
		len(mounts) != 1 || mounts[0].MountPath != "/var/lib/db" {
		t.Errorf("statefulset volumes %v, mounts %v; want claim db at /var/lib/db", vols, mounts)
	}
	if set.Labels[LabelGuestID] != s.ID || set.Annotations[AnnotSpecHash] != specHash(s) {
		t.Errorf("statefulset labels %v, annotations %v", set.Labels, set.Annotations)
	}
	if _, err := e.client.AppsV1().Deployments(ns).Get(e.ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment of a volume guest: %v, want none", err)
	}
	if _, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, "db", metav1.GetOptions{}); err != nil {
		t.Errorf("claim of the volume: %v", err)
	}
	if o := e.service("db").OwnerReferences; len(o) != 1 || o[0].Kind != "StatefulSet" || o[0].UID != set.UID {
		t.Errorf("service owners = %v, want the statefulset", o)
	}
	if st := e.inspect("db"); st.State != drivers.StateStopped || st.Image != s.Image {
		t.Errorf("Inspect(stopped statefulset guest) = %+v", st)
	}

	if err := e.d.Start(e.ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if st := e.inspect("db"); st.State != drivers.StateStarting {
		t.Errorf("Inspect after Start, no pod = %s, want starting", st.State)
	}
	e.simulateReadySetPod(e.statefulSetIn(ns, "db"))
	if st := e.inspect("db"); st.State != drivers.StateRunning || st.Address != "10.244.0.9" {
		t.Errorf("Inspect with a ready pod = %+v, want running at 10.244.0.9", st)
	}
	if list, err := e.d.List(e.ctx); err != nil || len(list) != 1 || list[0].Name != "db" || list[0].State != drivers.StateRunning {
		t.Errorf("List = %+v, %v; want db running", list, err)
	}

	// Update: the template rolls to the new image and limit; the run
	// state stays.
	s.Image, s.MemoryBytes = "registry.example/app:2.0", 512<<20
	e.create(s)
	set = e.statefulSetIn(ns, "db")
	c := set.Spec.Template.Spec.Containers[0]
	if c.Image != s.Image || c.Resources.Limits.Memory().Value() != 512<<20 || *set.Spec.Replicas != 1 || set.Annotations[AnnotSpecHash] != specHash(s) {
		t.Errorf("after update: image %s, memory %s, replicas %d; want the new image, 512Mi, 1", c.Image, c.Resources.Limits.Memory(), *set.Spec.Replicas)
	}

	// Drift: a hand-edited image and replica count are written back.
	set.Spec.Template.Spec.Containers[0].Image = "evil.example/x:1"
	three := int32(3)
	set.Spec.Replicas = &three
	if _, err := e.client.AppsV1().StatefulSets(ns).Update(e.ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.create(s)
	set = e.statefulSetIn(ns, "db")
	if set.Spec.Template.Spec.Containers[0].Image != s.Image || *set.Spec.Replicas != 1 {
		t.Errorf("drift not repaired: image %s, replicas %d", set.Spec.Template.Spec.Containers[0].Image, *set.Spec.Replicas)
	}

	// The guest loses its volume: it becomes a Deployment; the
	// StatefulSet and its pod go, the claim stays (a volume outlives its
	// guest's use of it).
	noVol := s
	noVol.Volume = nil
	e.create(noVol)
	if _, err := e.client.AppsV1().StatefulSets(ns).Get(e.ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("statefulset after the volume went: %v, want none", err)
	}
	if pods, _ := e.client.CoreV1().Pods(ns).List(e.ctx, metav1.ListOptions{LabelSelector: guestSelector(s.ID)}); len(pods.Items) != 0 {
		t.Errorf("%d pods of the statefulset left", len(pods.Items))
	}
	dep := e.deployment("db")
	if o := e.service("db").OwnerReferences; len(o) != 1 || o[0].Kind != "Deployment" || o[0].UID != dep.UID {
		t.Errorf("service owners after the switch = %v, want the deployment", o)
	}
	if _, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, "db", metav1.GetOptions{}); err != nil {
		t.Errorf("claim after the switch: %v, want it kept", err)
	}
	// And back.
	e.create(s)
	if _, err := e.client.AppsV1().Deployments(ns).Get(e.ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment after the volume came back: %v, want none", err)
	}
	e.statefulSetIn(ns, "db")

	if err := e.d.Start(e.ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Stop(e.ctx, "db", 0); err != nil {
		t.Fatal(err)
	}
	if set := e.statefulSetIn(ns, "db"); *set.Spec.Replicas != 0 {
		t.Errorf("replicas after Stop = %d, want 0", *set.Spec.Replicas)
	}
	if err := e.d.Destroy(e.ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.AppsV1().StatefulSets(ns).Get(e.ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("statefulset after Destroy: %v, want none", err)
	}
	if _, err := e.d.Inspect(e.ctx, "db"); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("Inspect after Destroy = %v, want ErrNotFound", err)
	}
	if _, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, "db", metav1.GetOptions{}); err != nil {
		t.Errorf("claim after Destroy: %v, want it kept", err)
	}
}
