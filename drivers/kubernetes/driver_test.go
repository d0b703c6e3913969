package kubernetes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8s "k8s.io/client-go/kubernetes"

	"corpus/drivers"
	"corpus/internal/k8stest"
	"corpus/internal/testrun"
)

// These tests run against a real kube-apiserver and etcd (envtest). No
// controller manager, scheduler or kubelet runs: where a test needs a pod
// to be running, it says so and makes one with k8stest.SimulateReadyPod.

type env struct {
	t      *testing.T
	ctx    context.Context
	client k8s.Interface
	d      *Driver
}

func newEnv(t *testing.T, c *k8stest.Cluster, node string) *env {
	t.Helper()
	d, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(2*time.Minute))
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, client: c.Client, d: d}
}

// settle waits until the driver's view of its namespace shows what the
// API server holds: the test's own writes (hand edits, simulated pods)
// go around the driver, which sees them a watch event later.
func (e *env) settle() { settle(e.t, e.ctx, e.client, e.d) }

func settle(t *testing.T, ctx context.Context, client k8s.Interface, d *Driver) {
	t.Helper()
	v, err := d.view(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{LabelSelector: managedSelector}
	ns := d.Namespace()
	deadline := time.Now().Add(testrun.D(10 * time.Second))
	for {
		live, seen := map[string]string{}, map[string]string{}
		deps, err1 := client.AppsV1().Deployments(ns).List(ctx, opts)
		svcs, err2 := client.CoreV1().Services(ns).List(ctx, opts)
		pods, err3 := client.CoreV1().Pods(ns).List(ctx, opts)
		claims, err4 := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, opts)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		for _, o := range deps.Items {
			live["deployment "+o.Name] = o.ResourceVersion
		}
		for _, o := range svcs.Items {
			live["service "+o.Name] = o.ResourceVersion
		}
		for _, o := range pods.Items {
			live["pod "+o.Name] = o.ResourceVersion
		}
		for _, o := range claims.Items {
			live["claim "+o.Name] = o.ResourceVersion
		}
		vd, _ := v.deps.List(labels.Everything())
		for _, o := range vd {
			seen["deployment "+o.Name] = o.ResourceVersion
		}
		vs, _ := v.svcs.List(labels.Everything())
		for _, o := range vs {
			seen["service "+o.Name] = o.ResourceVersion
		}
		vp, _ := v.pods.List(labels.Everything())
		for _, o := range vp {
			seen["pod "+o.Name] = o.ResourceVersion
		}
		vc, _ := v.claims.List(labels.Everything())
		for _, o := range vc {
			seen["claim "+o.Name] = o.ResourceVersion
		}
		if maps.Equal(live, seen) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver's view did not catch up: server %v, view %v", live, seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func spec(id, name string) drivers.GuestSpec {
	return drivers.GuestSpec{
		ID: id, Name: name, Image: "registry.example/app:1.0", MemoryBytes: 256 << 20, CPUMillis: 250,
		Env:   map[string]string{"TZ": "UTC", "MODE": "prod"},
		Ports: []drivers.Port{{GuestPort: 8080, HostPort: 8080, Protocol: "tcp"}},
	}
}

func (e *env) create(s drivers.GuestSpec) {
	e.t.Helper()
	if err := e.d.Create(e.ctx, s, nil); err != nil {
		e.t.Fatalf("Create(%s) = %v", s.Name, err)
	}
}

func (e *env) deployment(name string) *appsv1.Deployment {
	e.t.Helper()
	dep, err := e.client.AppsV1().Deployments(e.d.Namespace()).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("reading deployment %s: %v", name, err)
	}
	return dep
}

func (e *env) service(name string) *corev1.Service {
	e.t.Helper()
	svc, err := e.client.CoreV1().Services(e.d.Namespace()).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("reading service %s: %v", name, err)
	}
	return svc
}

func (e *env) inspect(name string) drivers.GuestStatus {
	e.t.Helper()
	st, err := e.d.Inspect(e.ctx, name)
	if err != nil {
		e.t.Fatalf("Inspect(%s) = %v", name, err)
	}
	return st
}

func TestDriver(t *testing.T) {
	c := k8stest.Start(t)

	t.Run("namespace once", func(t *testing.T) { t.Parallel(); testNamespaceOnce(t, c) })
	t.Run("create", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "create")
		s := spec("aaaa000000000001", "api")
		e.create(s)
		dep := e.deployment("api")
		if got := *dep.Spec.Replicas; got != 0 {
			t.Errorf("replicas after Create = %d, want 0 (created stopped)", got)
		}
		for _, m := range []metav1.ObjectMeta{dep.ObjectMeta, dep.Spec.Template.ObjectMeta} {
			if m.Labels[LabelGuestID] != s.ID || m.Labels[LabelGuest] != "api" || m.Labels[LabelManagedBy] != "corpus" {
				t.Errorf("labels = %v, want the guest's id, name and managed-by corpus", m.Labels)
			}
		}
		ctr := dep.Spec.Template.Spec.Containers[0]
		if ctr.Image != s.Image || ctr.Resources.Limits.Memory().Value() != 256<<20 || ctr.Resources.Limits.Cpu().MilliValue() != 250 {
			t.Errorf("container = %s %v, want %s with 256Mi and 250m", ctr.Image, ctr.Resources.Limits, s.Image)
		}
		if len(ctr.Env) != 2 || ctr.Env[0].Name != "MODE" || ctr.Env[1].Value != "UTC" {
			t.Errorf("env = %v, want MODE and TZ in order", ctr.Env)
		}
		svc := e.service("api")
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort != intstr.FromInt32(8080) {
			t.Errorf("service ports = %v, want 8080 -> 8080", svc.Spec.Ports)
		}
		if svc.Spec.Selector[LabelGuestID] != s.ID {
			t.Errorf("service selector = %v, want the guest id", svc.Spec.Selector)
		}
		if o := svc.OwnerReferences; len(o) != 1 || o[0].UID != dep.UID {
			t.Errorf("service owners = %v, want the deployment %s", o, dep.UID)
		}
		if st := e.inspect("api"); st.State != drivers.StateStopped || st.ID != s.ID || st.Image != s.Image {
			t.Errorf("Inspect = %+v, want stopped with id and image", st)
		}

		// Create again changes nothing.
		e.create(s)
		if again := e.deployment("api"); again.ResourceVersion != dep.ResourceVersion {
			t.Errorf("Create of an unchanged guest wrote the deployment (%s -> %s)", dep.ResourceVersion, again.ResourceVersion)
		}
		if again := e.service("api"); again.ResourceVersion != svc.ResourceVersion {
			t.Errorf("Create of an unchanged guest wrote the service")
		}
		// Another id with the same name is refused.
		other := spec("aaaa000000000002", "api")
		if err := e.d.Create(e.ctx, other, nil); !errors.Is(err, drivers.ErrExists) {
			t.Errorf("Create(same name, other id) = %v, want ErrExists", err)
		}

		if err := e.d.Start(e.ctx, "api"); err != nil {
			t.Fatal(err)
		}
		if got := *e.deployment("api").Spec.Replicas; got != 1 {
			t.Errorf("replicas after Start = %d, want 1", got)
		}
		if st := e.inspect("api"); st.State != drivers.StateStarting || !strings.HasPrefix(st.Message, "0/1 ready") {
			t.Errorf("Inspect before any pod = %s %q, want starting, 0/1 ready", st.State, st.Message)
		}
		// Simulated: no kubelet runs here; the test reports the pod stuck.
		if _, err := k8stest.SimulatePendingPod(e.ctx, e.client, e.deployment("api"), "ImagePullBackOff"); err != nil {
			t.Fatal(err)
		}
		e.settle()
		if st := e.inspect("api"); st.State != drivers.StateStarting || !strings.Contains(st.Message, "Pending: ImagePullBackOff") {
			t.Errorf("Inspect with a pending pod = %s %q, want starting with the pod's reason", st.State, st.Message)
		}
		// Simulated: the test plays kubelet and reports a ready pod.
		pod, err := k8stest.SimulateReadyPod(e.ctx, e.client, e.deployment("api"), "10.244.0.7")
		if err != nil {
			t.Fatal(err)
		}
		e.settle()
		st := e.inspect("api")
		if st.State != drivers.StateRunning || st.Address != "10.244.0.7" || !strings.Contains(st.Message, "1/1 ready; pod "+pod.Name+" Running") {
			t.Errorf("Inspect with a ready pod = %+v, want running at 10.244.0.7 naming %s", st, pod.Name)
		}
		list, err := e.d.List(e.ctx)
		if err != nil || len(list) != 1 || list[0].ID != s.ID || list[0].State != drivers.StateRunning {
			t.Errorf("List = %+v, %v; want the one running guest", list, err)
		}
	})

	t.Run("supervised", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "supervised")
		s := spec("abab000000000001", "proj")
		s.Boot = &drivers.Boot{Command: []string{"/bin/sh", "-c", "exec sup daemon"}, Keep: []string{"/usr/local/lib/corpus", "/srv/projects"}}
		e.create(s)
		pod := e.deployment("proj").Spec.Template.Spec
		ctr := pod.Containers[0]
		if !slices.Equal(ctr.Command, s.Boot.Command) {
			t.Errorf("container command = %q, want the supervisor's boot %q", ctr.Command, s.Boot.Command)
		}
		kept := map[string]bool{}
		for _, m := range ctr.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.EmptyDir != nil {
					kept[m.MountPath] = true
				}
			}
		}
		if len(kept) != 2 || !kept["/usr/local/lib/corpus"] || !kept["/srv/projects"] {
			t.Errorf("emptyDir mounts = %v, want the two kept folders", kept)
		}
		// A guest that stops running a project runs its image's command
		// again.
		s.Boot = nil
		e.create(s)
		if pod := e.deployment("proj").Spec.Template.Spec; len(pod.Containers[0].Command) != 0 || len(pod.Volumes) != 0 {
			t.Errorf("without Boot: command %q, volumes %v; want the image's command and no volumes", pod.Containers[0].Command, pod.Volumes)
		}
	})

	t.Run("update", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "update")
		s := spec("bbbb000000000001", "web")
		e.create(s)
		if err := e.d.Start(e.ctx, "web"); err != nil {
			t.Fatal(err)
		}
		s.Image = "registry.example/app:2.0"
		s.MemoryBytes = 512 << 20
		delete(s.Env, "MODE")
		s.Ports = []drivers.Port{{GuestPort: 9090, Protocol: "tcp"}, {GuestPort: 53, HostPort: 5353, Protocol: "udp"}}
		e.create(s)
		dep := e.deployment("web")
		ctr := dep.Spec.Template.Spec.Containers[0]
		if ctr.Image != s.Image || ctr.Resources.Limits.Memory().Value() != 512<<20 || len(ctr.Env) != 1 {
			t.Errorf("after update: %s, %v, env %v; want the new image, 512Mi, one env var", ctr.Image, ctr.Resources.Limits, ctr.Env)
		}
		if *dep.Spec.Replicas != 1 {
			t.Errorf("update changed the run state: replicas %d, want 1", *dep.Spec.Replicas)
		}
		ports := e.service("web").Spec.Ports
		if len(ports) != 2 || ports[0].Port != 9090 || ports[1].Port != 5353 || ports[1].Protocol != corev1.ProtocolUDP {
			t.Errorf("service ports after update = %v, want 9090/tcp and 5353/udp", ports)
		}
		if st := e.inspect("web"); st.Image != s.Image || st.MemoryBytes != 512<<20 {
			t.Errorf("Inspect after update = %+v", st)
		}
		// No ports any more: the Service goes.
		s.Ports = nil
		e.create(s)
		if _, err := e.client.CoreV1().Services(e.d.Namespace()).Get(e.ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("service of a guest without ports: %v, want not found", err)
		}
	})

	t.Run("stop and delete", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "delete")
		s := spec("cccc000000000001", "db")
		e.create(s)
		if err := e.d.Start(e.ctx, "db"); err != nil {
			t.Fatal(err)
		}
		// Simulated: a ready pod, which no kubelet will stop here.
		if _, err := k8stest.SimulateReadyPod(e.ctx, e.client, e.deployment("db"), "10.244.0.9"); err != nil {
			t.Fatal(err)
		}
		e.settle()
		if err := e.d.Stop(e.ctx, "db", 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if st := e.inspect("db"); st.State != drivers.StateStopped {
			t.Errorf("Inspect after Stop = %s, want stopped (pods removed after the timeout)", st.State)
		}
		if err := e.d.Destroy(e.ctx, "db"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Inspect(e.ctx, "db"); !errors.Is(err, drivers.ErrNotFound) {
			t.Errorf("Inspect after Destroy = %v, want ErrNotFound", err)
		}
		ns := e.d.Namespace()
		if _, err := e.client.CoreV1().Services(ns).Get(e.ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("service after Destroy: %v, want not found", err)
		}
		if pods, _ := e.client.CoreV1().Pods(ns).List(e.ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
			t.Errorf("%d pods left after Destroy", len(pods.Items))
		}
		if err := e.d.Destroy(e.ctx, "db"); err != nil {
			t.Errorf("Destroy of a missing guest = %v, want nil", err)
		}
		if err := e.d.Start(e.ctx, "db"); !errors.Is(err, drivers.ErrNotFound) {
			t.Errorf("Start of a missing guest = %v, want ErrNotFound", err)
		}
	})

	t.Run("drift repair", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "drift")
		s := spec("dddd000000000001", "app")
		e.create(s)
		if err := e.d.Start(e.ctx, "app"); err != nil {
			t.Fatal(err)
		}
		ns := e.d.Namespace()
		// By hand: another image, a bigger limit, three replicas, an
		// extra env var, a paused rollout; the Service's port changed.
		dep := e.deployment("app")
		ctr := &dep.Spec.Template.Spec.Containers[0]
		ctr.Image = "evil.example/miner:latest"
		ctr.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("8Gi")
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "EXTRA", Value: "1"})
		three := int32(3)
		dep.Spec.Replicas = &three
		dep.Spec.Paused = true
		if _, err := e.client.AppsV1().Deployments(ns).Update(e.ctx, dep, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := e.service("app")
		svc.Spec.Ports[0].Port = 1234
		if _, err := e.client.CoreV1().Services(ns).Update(e.ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.settle()
		e.create(s)
		dep = e.deployment("app")
		ctr = &dep.Spec.Template.Spec.Containers[0]
		if ctr.Image != s.Image || ctr.Resources.Limits.Memory().Value() != 256<<20 || len(ctr.Env) != 2 || *dep.Spec.Replicas != 1 || dep.Spec.Paused {
			t.Errorf("after repair: image %s, limits %v, env %v, replicas %d, paused %v; want the spec's, 1 replica, not paused",
				ctr.Image, ctr.Resources.Limits, ctr.Env, *dep.Spec.Replicas, dep.Spec.Paused)
		}
		if p := e.service("app").Spec.Ports[0].Port; p != 8080 {
			t.Errorf("service port after repair = %d, want 8080", p)
		}
		// Deleted by hand: both objects come back.
		if err := e.client.CoreV1().Services(ns).Delete(e.ctx, "app", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.client.AppsV1().Deployments(ns).Delete(e.ctx, "app", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.settle()
		if st, err := e.d.Inspect(e.ctx, "app"); !errors.Is(err, drivers.ErrNotFound) {
			t.Errorf("Inspect with every object deleted = %+v, %v; want ErrNotFound", st, err)
		}
		e.create(s)
		e.deployment("app")
		e.service("app")
	})

	t.Run("garbage collection", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "gc")
		keep, gone := spec("eeee000000000001", "keep"), spec("eeee000000000002", "gone")
		e.create(keep)
		e.create(gone)
		ns := e.d.Namespace()
		// Half-deleted by hand: the Deployment of "gone" is gone, its
		// Service is left (no garbage collector runs here).
		if err := e.client.AppsV1().Deployments(ns).Delete(e.ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.settle()
		list, err := e.d.List(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]drivers.State{}
		for _, g := range list {
			ids[g.ID] = g.State
		}
		if len(ids) != 2 || ids[gone.ID] != drivers.StateStopped {
			t.Fatalf("List = %+v, want keep and the remains of gone", list)
		}
		if st := e.inspect("gone"); st.ID != gone.ID {
			t.Errorf("Inspect(remains) = %+v, want the id of gone", st)
		}
		// What the agent does with a listed guest nobody wants.
		if err := e.d.Destroy(e.ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.CoreV1().Services(ns).Get(e.ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("service of a collected guest: %v, want not found", err)
		}
		if list, _ := e.d.List(e.ctx); len(list) != 1 || list[0].ID != keep.ID {
			t.Errorf("List after collection = %+v, want only keep", list)
		}
	})

	t.Run("namespace isolation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "iso")
		other := newEnv(t, c, "iso-other")
		s := spec("ffff000000000001", "shared")
		// Objects with corpus's labels outside the driver's namespace:
		// in "default" and in another corpus node's namespace.
		foreign := desiredDeployment("default", s, 1, "")
		if _, err := e.client.AppsV1().Deployments("default").Create(e.ctx, foreign, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		other.create(s)
		// An object of the driver's namespace that corpus does not manage.
		if err := e.d.ensureNamespace(e.ctx); err != nil {
			t.Fatal(err)
		}
		theirs := desiredDeployment(e.d.Namespace(), spec("ffff000000000002", "theirs"), 1, "")
		delete(theirs.Labels, LabelManagedBy)
		if _, err := e.client.AppsV1().Deployments(e.d.Namespace()).Create(e.ctx, theirs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		before := map[string]string{
			"default": e.deploymentIn("default", "shared").ResourceVersion,
			"other":   e.deploymentIn(other.d.Namespace(), "shared").ResourceVersion,
			"theirs":  e.deploymentIn(e.d.Namespace(), "theirs").ResourceVersion,
		}
		if list, err := e.d.List(e.ctx); err != nil || len(list) != 0 {
			t.Errorf("List = %+v, %v; want nothing from other namespaces or unmanaged objects", list, err)
		}
		if _, err := e.d.Inspect(e.ctx, "theirs"); !errors.Is(err, drivers.ErrNotFound) {
			t.Errorf("Inspect(unmanaged) = %v, want ErrNotFound", err)
		}
		if err := e.d.Create(e.ctx, spec("ffff000000000003", "theirs"), nil); !errors.Is(err, drivers.ErrExists) {
			t.Errorf("Create over an unmanaged deployment = %v, want ErrExists", err)
		}
		if err := e.d.Destroy(e.ctx, "shared"); err != nil {
			t.Fatal(err)
		}
		if err := e.d.Destroy(e.ctx, "theirs"); err != nil {
			t.Fatal(err)
		}
		after := map[string]string{
			"default": e.deploymentIn("default", "shared").ResourceVersion,
			"other":   e.deploymentIn(other.d.Namespace(), "shared").ResourceVersion,
			"theirs":  e.deploymentIn(e.d.Namespace(), "theirs").ResourceVersion,
		}
		for k, v := range before {
			if after[k] != v {
				t.Errorf("deployment %s was written (%s -> %s)", k, v, after[k])
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "bad")
		for _, tc := range []struct {
			name string
			edit func(*drivers.GuestSpec)
		}{
			{"image with upper case path", func(s *drivers.GuestSpec) { s.Image = "registry.example/App:1" }},
			{"image with two colons", func(s *drivers.GuestSpec) { s.Image = "app::1" }},
			{"image with a space", func(s *drivers.GuestSpec) { s.Image = "app 1" }},
			{"empty image", func(s *drivers.GuestSpec) { s.Image = "" }},
			{"name with underscore", func(s *drivers.GuestSpec) { s.Name = "my_api" }},
			{"name with upper case", func(s *drivers.GuestSpec) { s.Name = "Api" }},
			{"name starting with a digit", func(s *drivers.GuestSpec) { s.Name = "1api" }},
			{"name too long", func(s *drivers.GuestSpec) { s.Name = strings.Repeat("a", 64) }},
			{"env name", func(s *drivers.GuestSpec) { s.Env = map[string]string{"1=x": "y"} }},
			{"port", func(s *drivers.GuestSpec) { s.Ports = []drivers.Port{{GuestPort: 70000}} }},
			{"protocol", func(s *drivers.GuestSpec) { s.Ports = []drivers.Port{{GuestPort: 80, Protocol: "sctp6"}} }},
			{"host mount", func(s *drivers.GuestSpec) { s.Mounts = []drivers.Mount{{Source: "/etc", Target: "/x"}} }},
		} {
			s := spec("abab000000000001", "good")
			tc.edit(&s)
			if err := e.d.Create(e.ctx, s, nil); !errors.Is(err, drivers.ErrInvalidSpec) {
				t.Errorf("%s: Create = %v, want ErrInvalidSpec", tc.name, err)
			}
		}
		// Nothing changed: not even the namespace was made.
		if _, err := e.client.CoreV1().Namespaces().Get(e.ctx, e.d.Namespace(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace after refused creates: %v, want not found", err)
		}
		// A refused update leaves the guest as it was.
		s := spec("abab000000000002", "good")
		e.create(s)
		rv := e.deployment("good").ResourceVersion
		s.Image = "registry.example/App:2"
		if err := e.d.Create(e.ctx, s, nil); !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("update to a bad image: %v, want ErrInvalidSpec", err)
		}
		if got := e.deployment("good"); got.ResourceVersion != rv || got.Spec.Template.Spec.Containers[0].Image != "registry.example/app:1.0" {
			t.Errorf("a refused update wrote the deployment")
		}
		for _, ok := range []string{"busybox", "nginx:1.27", "registry.example:5000/team/app:v1.2-rc.1", "ghcr.io/a/b@sha256:" + strings.Repeat("ab", 32)} {
			if err := validImage(ok); err != nil {
				t.Errorf("validImage(%q) = %v, want nil", ok, err)
			}
		}
	})

	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "exec")
		e.create(spec("acac000000000001", "sh"))
		if err := e.d.Start(e.ctx, "sh"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Exec(e.ctx, "sh", drivers.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrNotRunning) {
			t.Errorf("Exec without a ready pod = %v, want ErrNotRunning", err)
		}
		if _, err := e.d.Exec(e.ctx, "sh", drivers.ExecRequest{Argv: []string{"id"}, UID: 1000}); !errors.Is(err, drivers.ErrNotSupported) {
			t.Errorf("Exec as uid 1000 = %v, want ErrNotSupported", err)
		}
		// Simulated ready pod, on no node and with no kubelet: the API
		// server cannot reach a container, and Exec must say so rather
		// than pretend the command ran.
		if _, err := k8stest.SimulateReadyPod(e.ctx, e.client, e.deployment("sh"), "10.244.0.8"); err != nil {
			t.Fatal(err)
		}
		e.settle()
		ctx, cancel := context.WithTimeout(e.ctx, testrun.D(20*time.Second))
		defer cancel()
		code, err := e.d.Exec(ctx, "sh", drivers.ExecRequest{Argv: []string{"true"}})
		if err == nil {
			t.Fatalf("Exec with no kubelet = %d, nil; want an error", code)
		}
		t.Logf("Exec with no kubelet: %v", err)
	})

	t.Run("volume", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, c, "vol")
		fixed, growable := "fixed", "growable"
		yes := true
		for _, sc := range []*storagev1.StorageClass{
			{ObjectMeta: metav1.ObjectMeta{Name: fixed}, Provisioner: "example.com/none"},
			{ObjectMeta: metav1.ObjectMeta{Name: growable}, Provisioner: "example.com/none", AllowVolumeExpansion: &yes},
		} {
			if _, err := e.client.StorageV1().StorageClasses().Create(e.ctx, sc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			class   string
			growErr error
		}{{fixed, ErrNotExpandable}, {growable, nil}} {
			d, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "vol-" + tc.class, StorageClass: tc.class})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			s := spec("adad000000000001", "data")
			s.Volume = &drivers.Volume{Name: "data", SizeBytes: 1 << 30, Path: "/srv/data"}
			if err := d.Create(e.ctx, s, nil); err != nil {
				t.Fatal(err)
			}
			claims := e.client.CoreV1().PersistentVolumeClaims(d.Namespace())
			claim, err := claims.Get(e.ctx, "data", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := d.ObserveVolume(e.ctx, "data"); err != nil || st.Ready || !strings.Contains(st.Message, "Pending") || st.SizeBytes != 1<<30 {
				t.Errorf("%s: ObserveVolume(pending claim) = %+v, %v; want not ready, Pending, 1 GiB", tc.class, st, err)
			}
			// Simulated: no volume controller runs here to bind the claim;
			// the test binds it, as a provisioner would.
			claim.Status.Phase = corev1.ClaimBound
			if claim, err = claims.UpdateStatus(e.ctx, claim, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			settle(t, e.ctx, e.client, d)
			vols := e.statefulSetIn(d.Namespace(), "data").Spec.Template.Spec.Volumes
			if len(vols) != 1 || vols[0].PersistentVolumeClaim == nil || vols[0].PersistentVolumeClaim.ClaimName != "data" {
				t.Errorf("%s: pod volumes = %v, want the claim", tc.class, vols)
			}
			s.Volume.SizeBytes = 2 << 30
			err = d.Create(e.ctx, s, nil)
			switch {
			case tc.growErr != nil && (!errors.Is(err, tc.growErr) || !errors.Is(err, drivers.ErrInvalidSpec)):
				t.Errorf("%s: grow = %v, want %v", tc.class, err, tc.growErr)
			case tc.growErr == nil && err != nil:
				t.Errorf("%s: grow = %v, want nil", tc.class, err)
			}
			after, _ := claims.Get(e.ctx, "data", metav1.GetOptions{})
			size := after.Spec.Resources.Requests[corev1.ResourceStorage]
			want := int64(2 << 30)
			if tc.growErr != nil {
				want = 1 << 30
				if after.ResourceVersion != claim.ResourceVersion {
					t.Errorf("%s: a refused expansion wrote the claim", tc.class)
				}
			}
			if size.Value() != want {
				t.Errorf("%s: claim size = %s, want %d", tc.class, size.String(), want)
			}
			s.Volume.SizeBytes = 1 << 20
			if err := d.Create(e.ctx, s, nil); !errors.Is(err, ErrCannotShrink) {
				t.Errorf("%s: shrink = %v, want ErrCannotShrink", tc.class, err)
			}
			// The volume outlives its guest, and a new guest binds it.
			if err := d.Destroy(e.ctx, "data"); err != nil {
				t.Fatal(err)
			}
			kept, err := claims.Get(e.ctx, "data", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: claim after Destroy: %v, want it kept", tc.class, err)
			}
			next := spec("adad000000000002", "db2")
			next.Volume = &drivers.Volume{Name: "data", SizeBytes: kept.Spec.Resources.Requests.Storage().Value(), Path: "/var/lib/db"}
			if err := d.Create(e.ctx, next, nil); err != nil {
				t.Fatalf("%s: a new guest on the kept volume: %v", tc.class, err)
			}
			rebound, _ := claims.Get(e.ctx, "data", metav1.GetOptions{})
			if rebound.UID != kept.UID || rebound.Labels[LabelGuestID] != next.ID {
				t.Errorf("%s: claim after rebinding = %s %v, want the same claim labelled for %s", tc.class, rebound.UID, rebound.Labels, next.ID)
			}
			settle(t, e.ctx, e.client, d)
			if st, err := d.ObserveVolume(e.ctx, "data"); err != nil || !st.Ready {
				t.Errorf("%s: ObserveVolume(bound claim) = %+v, %v; want ready", tc.class, st, err)
			}
			if err := d.DeleteVolume(e.ctx, "data"); err != nil {
				t.Fatal(err)
			}
			// The pvc-protection finalizer holds a deleted claim until a
			// controller sees no pod uses it; none runs here: deleting is
			// as far as it gets.
			if c, err := claims.Get(e.ctx, "data", metav1.GetOptions{}); !apierrors.IsNotFound(err) && (err != nil || c.DeletionTimestamp == nil) {
				t.Errorf("%s: claim after DeleteVolume: %v, want it deleted or being deleted", tc.class, err)
			}
			if err := d.DeleteVolume(e.ctx, "data"); err != nil {
				t.Errorf("%s: DeleteVolume of a missing volume = %v, want nil", tc.class, err)
			}
		}
	})

	t.Run("statefulset", func(t *testing.T) {
		t.Parallel()
		testStatefulSet(t, newEnv(t, c, "sts"))
	})

	t.Run("capacity", func(t *testing.T) {
		// Not parallel: it adds a cluster Node.
		e := newEnv(t, c, "cap")
		if got, err := e.d.Capacity(e.ctx); err != nil || got != (drivers.Capacity{}) {
			t.Errorf("Capacity of a cluster without nodes = %+v, %v; want zero", got, err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}
		node, err := e.client.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.client.CoreV1().Nodes().Delete(context.Background(), "worker-1", metav1.DeleteOptions{}) })
		node.Status.Allocatable = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("3500m"), corev1.ResourceMemory: resource.MustParse("7Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
		}
		if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := drivers.Capacity{CPUMillis: 3500, MemoryBytes: 7 << 30, DiskBytes: 50 << 30}
		if got, err := e.d.Capacity(e.ctx); err != nil || got != (drivers.Capacity{}) {
			t.Errorf("Capacity read again within %s = %+v, %v; want the first reading", capacityTTL, got, err)
		}
		e.d.capAt = time.Time{} // as if the reading were old
		if got, err := e.d.Capacity(e.ctx); err != nil || got != want {
			t.Errorf("Capacity = %+v, %v; want %+v", got, err, want)
		}
		fixed := drivers.Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30}
		d, _ := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "cap", Capacity: fixed})
		if got, _ := d.Capacity(e.ctx); got != fixed {
			t.Errorf("Capacity with an override = %+v, want %+v", got, fixed)
		}
		fp := e.d.Fingerprint(e.ctx)
		if !fp.Healthy || fp.Attributes["kubernetes.version"] != "v1.32.13" {
			t.Errorf("Fingerprint = %+v, want healthy, v1.32.13", fp)
		}
	})
}

func (e *env) deploymentIn(ns, name string) *appsv1.Deployment {
	e.t.Helper()
	dep, err := e.client.AppsV1().Deployments(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("reading deployment %s/%s: %v", ns, name, err)
	}
	return dep
}

func TestExecArgv(t *testing.T) {
	for _, tc := range []struct {
		req  drivers.ExecRequest
		want string
	}{
		{drivers.ExecRequest{Argv: []string{"ls", "-l"}}, "ls -l"},
		{drivers.ExecRequest{Argv: []string{"make"}, Dir: "/srv/app; rm -rf /"}, `sh -c cd "$1" && shift && exec "$@" sh /srv/app; rm -rf / make`},
		{drivers.ExecRequest{Argv: []string{"A=1"}, Env: map[string]string{"B": "2", "A": "$(x)"}}, "env A=$(x) B=2 -- A=1"},
	} {
		if got := strings.Join(execArgv(tc.req), " "); got != tc.want {
			t.Errorf("execArgv(%+v) = %q, want %q", tc.req, got, tc.want)
		}
	}
}

// TestExecTTY: with a terminal the exec asks the kubelet for one (one
// stream, no stderr) and passes window sizes on until the session ends.
// The exec itself needs a kubelet, which this machine has not.
func TestExecTTY(t *testing.T) {
	sizes := make(chan drivers.TerminalSize, 2)
	o := execOptions(drivers.ExecRequest{Argv: []string{"sh"}, Stdin: strings.NewReader(""), TTY: sizes})
	if !o.TTY || o.Stderr || !o.Stdin || !o.Stdout {
		t.Errorf("exec options with a terminal: %+v", o)
	}
	if o := execOptions(drivers.ExecRequest{Argv: []string{"true"}}); o.TTY || !o.Stderr || o.Stdin {
		t.Errorf("exec options without: %+v", o)
	}
	sizes <- drivers.TerminalSize{Rows: 40, Cols: 120}
	close(sizes)
	q := sizeQueue(sizes)
	if sz := q.Next(); sz == nil || sz.Width != 120 || sz.Height != 40 {
		t.Errorf("first size %+v", sz)
	}
	if sz := q.Next(); sz != nil {
		t.Errorf("a size after the end: %+v", sz)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Kubeconfig: "/k", NamespacePrefix: "corpus-", Node: "k8s"}, true},
		{Config{NamespacePrefix: "corpus-", Node: "k8s"}, false},
		{Config{Kubeconfig: "/k", Node: "k8s"}, false},
		{Config{Kubeconfig: "/k", NamespacePrefix: "Corpus_", Node: "k8s"}, false},
		{Config{Kubeconfig: "/k", NamespacePrefix: "corpus-", Node: strings.Repeat("n", 60)}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
}

// TestVolumeMode: the driver keeps its guests' volumes itself (claims),
// says so in its capabilities, and is a VolumeKeeper, which the agent
// calls for them.
func TestVolumeMode(t *testing.T) {
	var d drivers.Driver = &Driver{}
	_, keeper := d.(drivers.VolumeKeeper)
	if got := d.Capabilities().Volumes; got != drivers.KeptVolumes || !keeper {
		t.Errorf("Capabilities().Volumes = %q, VolumeKeeper %t; want %q, true", got, keeper, drivers.KeptVolumes)
	}
}
