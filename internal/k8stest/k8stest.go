// Package k8stest starts a real Kubernetes control plane (etcd and
// kube-apiserver, through controller-runtime's envtest) for tests. The
// binaries come from the cache scripts/k8s-test-binaries fills. There is
// no controller manager, scheduler or kubelet: API objects are real, and
// nothing runs them; what a kubelet would report, a test sets itself
// (see SimulateReadyPod) and says so.
package k8stest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"corpus/internal/testrun"
)

// DefaultAssets is where scripts/k8s-test-binaries puts the binaries.
const DefaultAssets = "/var/cache/corpus-test/k8s-v1.32.13"

// Assets returns the folder holding etcd and kube-apiserver:
// $KUBEBUILDER_ASSETS, else $CORPUS_K8S_ASSETS, else DefaultAssets. While
// scripts/k8s-test-binaries builds them (test/run starts it in the
// background; it holds the folder's .lock) it waits, for as long as the
// build shows progress (testrun.Wait). Missing binaries skip the test, or
// fail it when $CORPUS_K8S_REQUIRED is set, as it is in CI, where nothing
// may skip.
func Assets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = os.Getenv("CORPUS_K8S_ASSETS")
	}
	if dir == "" {
		dir = DefaultAssets
	}
	var missing string
	testrun.Wait(t, 10*time.Minute, "the Kubernetes test binaries in "+dir, func() error {
		if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
			return nil
		}
		if b, err := os.ReadFile(filepath.Join(dir, ".failed")); err == nil {
			missing = fmt.Sprintf("building the Kubernetes test binaries into %s failed: %s", dir, b)
			return nil
		}
		if !building(dir) {
			missing = fmt.Sprintf("no Kubernetes test binaries in %s (run scripts/k8s-test-binaries, minutes once)", dir)
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(dir, ".progress"))
		return fmt.Errorf("being built: %s", strings.TrimSpace(string(b)))
	})
	if missing != "" {
		if os.Getenv("CORPUS_K8S_REQUIRED") != "" {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return dir
}

// building says whether scripts/k8s-test-binaries is building into dir:
// it holds an exclusive lock on dir/.lock while it does.
func building(dir string) bool {
	f, err := os.Open(filepath.Join(dir, ".lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// Cluster is a running API server.
type Cluster struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client k8s.Interface
}

// Option changes how Start starts the API server.
type Option func(*options)

type options struct{ serviceRange string }

// ServiceRange makes the API server give Services cluster IPs from cidr
// (default 10.96.0.0/16). A loopback range (127.x) lets a test stand in
// for kube-proxy with a listener on a Service's cluster IP and port,
// without touching the host's network.
func ServiceRange(cidr string) Option { return func(o *options) { o.serviceRange = cidr } }

// Start starts etcd and kube-apiserver on loopback and stops them (by the
// processes envtest started, removing its temporary folders) when the
// test ends, whether it passed or not.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	// envtest logs through controller-runtime's logger, which otherwise
	// complains, with a stack, that it was never set.
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{
		BinaryAssetsDirectory:    Assets(t),
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// envtest's default service range, a /24, holds 253 Services; the
	// scale measurement makes more.
	o := options{serviceRange: "10.96.0.0/16"}
	for _, f := range opts {
		f(&o)
	}
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", o.serviceRange)
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping kube-apiserver: %v", err)
		}
	})
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := k8s.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Env: env, Config: cfg, Client: client}
}

// Kubeconfig writes a kubeconfig of a cluster-admin user into dir and
// returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, dir string) string {
	t.Helper()
	u, err := c.Env.AddUser(envtest.User{Name: "corpus-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding a cluster user: %v", err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// SimulateReadyPod does what a ReplicaSet controller, a scheduler and a
// kubelet would do for dep's first replica, none of which runs here: it
// makes a pod from dep's template and marks it running and ready, with
// podIP, and sets dep's ready count. It is a simulation, named so in
// every test that uses it.
func SimulateReadyPod(ctx context.Context, client k8s.Interface, dep *appsv1.Deployment, podIP string) (*corev1.Pod, error) {
	now := metav1.Now()
	c := dep.Spec.Template.Spec.Containers[0]
	pod, err := simulatePod(ctx, client, dep, corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: podIP, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: c.Name, Ready: true, Image: c.Image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	})
	if err != nil {
		return nil, err
	}
	dep = dep.DeepCopy()
	dep.Status.Replicas, dep.Status.ReadyReplicas, dep.Status.AvailableReplicas = 1, 1, 1
	if _, err := client.AppsV1().Deployments(dep.Namespace).UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("setting simulated deployment status: %w", err)
	}
	return pod, nil
}

// SimulatePendingPod makes a pod of dep's template stuck Pending with a
// waiting container, as a kubelet reports an image it cannot pull
// (reason "ImagePullBackOff"). A simulation, like SimulateReadyPod.
func SimulatePendingPod(ctx context.Context, client k8s.Interface, dep *appsv1.Deployment, reason string) (*corev1.Pod, error) {
	c := dep.Spec.Template.Spec.Containers[0]
	return simulatePod(ctx, client, dep, corev1.PodStatus{
		Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
		}},
	})
}

func simulatePod(ctx context.Context, client k8s.Interface, dep *appsv1.Deployment, st corev1.PodStatus) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: dep.Name + "-simulated-", Namespace: dep.Namespace,
			Labels: dep.Spec.Template.Labels,
		},
		Spec: dep.Spec.Template.Spec,
	}
	pod, err := client.CoreV1().Pods(dep.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating simulated pod: %w", err)
	}
	pod.Status = st
	if pod, err = client.CoreV1().Pods(dep.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("setting simulated pod status: %w", err)
	}
	return pod, nil
}
