package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/internal/k8stest"
	"corpus/internal/testrun"
)

// k8sCluster is a coordinator and one agent serving a real kube-apiserver
// as its node, all on loopback with ports of their own: no network
// namespace is needed, the guests live in the API server.
type k8sCluster struct {
	*cluster // no lab: cli, json and guest run on loopback
	kube     *k8stest.Cluster
	agent    *proc
	ns       string
	// proxy is the HTTP address of the agent's proxy.
	proxy string
}

// newK8sCluster starts it all, the node with capacity given as
// --capacity takes it (memory=8G,cpus=4,disk=100G).
func newK8sCluster(t *testing.T, node, capacity string, opts ...k8stest.Option) *k8sCluster {
	t.Helper()
	requireE2E(t)
	kube := k8stest.Start(t, opts...)
	dir := tempDir(t)
	c := &k8sCluster{
		cluster: &cluster{t: t, dir: dir, api: testrun.FreeAddr(t), cfgHome: filepath.Join(dir, "cfg"),
			ca: filepath.Join(dir, "coordinator", "tls", "ca.crt")},
		kube: kube, ns: "corpus-" + node, proxy: testrun.FreeAddr(t),
	}
	startIn(t, "", "coordinator", nil, "coordinator", "--data-dir", filepath.Join(dir, "coordinator"),
		"--api-addr", c.api, "--raft-addr", testrun.FreeAddr(t), "--dns-addr", testrun.FreeAddr(t), "--gossip-addr", testrun.FreeAddr(t), "--metrics-addr", testrun.FreeAddr(t))
	eventually(t, 30*time.Second, "coordinator ready", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "coordinator", "ops-token"))
		if err != nil {
			return err
		}
		c.token = strings.TrimSpace(string(b))
		var st struct{ Leader string }
		if err := c.json(&st, "status"); err != nil || st.Leader == "" {
			return fmt.Errorf("no leader yet (%v)", err)
		}
		return nil
	})
	kc := kube.Kubeconfig(t, dir)
	agentCfg := filepath.Join(dir, "agent-"+node+".yaml")
	// The test cluster has no nodes, so no allocatable resources: add-k8s
	// refuses to guess and asks for --capacity.
	if _, errOut, code := c.cli("node", "add-k8s", node, "--kubeconfig", kc, "--config-out", agentCfg); code == 0 || !strings.Contains(errOut, "--capacity") {
		t.Fatalf("add-k8s on a cluster without nodes = exit %d, %q; want a refusal asking for --capacity", code, errOut)
	}
	out := c.mustCLI("node", "add-k8s", node, "--kubeconfig", kc, "--namespace-prefix", "corpus-",
		"--capacity", capacity, "--state-dir", filepath.Join(dir, "agent-"+node),
		"--api-addr", testrun.FreeAddr(t), "--proxy-http-addr", c.proxy, "--metrics-addr", testrun.FreeAddr(t), "--config-out", agentCfg)
	if !strings.Contains(out, "v1.32.13") || !strings.Contains(out, c.ns) {
		t.Errorf("add-k8s said %q; want the cluster's version and the namespace %s", out, c.ns)
	}
	// It runs in the host's namespace: its proxy's HTTPS port is a free
	// one, not :443, which another program of the host may hold.
	c.agent = startIn(t, "", "agent "+node, nil, "agent", "--config", agentCfg, "--proxy-https-addr", testrun.FreeAddr(t), "--resync-interval", "1s", "--report-interval", "1s")
	eventually(t, 60*time.Second, "node "+node+" ready", func() error {
		var n struct {
			Node struct {
				Node struct {
					Status   string
					Capacity struct {
						MemoryBytes string `json:"memory_bytes"`
					}
				} `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&n, "node", "show", node); err != nil {
			return err
		}
		if n.Node.Node.Status != "ready" {
			return fmt.Errorf("status %q", n.Node.Node.Status)
		}
		if n.Node.Node.Capacity.MemoryBytes == "" {
			return errors.New("no capacity reported")
		}
		return nil
	})
	return c
}

// objects reports whether the guest's Deployment and Service exist.
func (c *k8sCluster) objects(ctx context.Context, name string) (dep *appsv1.Deployment, svc bool, err error) {
	dep, err = c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	_, err = c.kube.Client.CoreV1().Services(c.ns).Get(ctx, name, metav1.GetOptions{})
	return dep, err == nil, err
}

// TestKubernetesNode drives a Kubernetes cluster registered as a node
// through the CLI: create, observed state, drift repair, a second guest
// on the same port, collection of objects nobody wants, and delete. No
// kubelet runs: the test marks the pod ready itself (simulated).
func TestKubernetesNode(t *testing.T) {
	// Services get cluster IPs on loopback (127.100.0.0/16), so the test
	// can stand in for kube-proxy with a listener there.
	c := newK8sCluster(t, "k8s1", "memory=8G,cpus=4,disk=100G", k8stest.ServiceRange("127.100.0.0/16"))
	var n struct {
		Node struct {
			Node struct {
				Capacity struct {
					MemoryBytes string `json:"memory_bytes"`
				}
			} `json:"node"`
		} `json:"node"`
	}
	if err := c.json(&n, "node", "show", "k8s1"); err != nil || n.Node.Node.Capacity.MemoryBytes != fmt.Sprint(8<<30) {
		t.Errorf("capacity of k8s1 = %+v, %v; want the 8 GiB --capacity gave", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(5*time.Minute))
	defer cancel()

	start := time.Now()
	c.mustCLI("guest", "create", "api", "--driver", "kubernetes", "--image", "registry.example/app:1.0",
		"--memory", "256M", "--port", "8080", "--detach")
	eventually(t, 30*time.Second, "deployment and service of api", func() error {
		_, _, err := c.objects(ctx, "api")
		return err
	})
	t.Logf("guest create -> Deployment and Service exist: %s", time.Since(start).Round(time.Millisecond))
	if g := c.guest("api"); g.NodeName != "k8s1" {
		t.Fatalf("guest api placed on %q, want k8s1", g.NodeName)
	}

	// The agent starts the guest: one replica. No kubelet runs here, so
	// the test plays one and reports the pod ready (simulated).
	var dep *appsv1.Deployment
	eventually(t, 30*time.Second, "api scaled to one replica", func() error {
		d, _, err := c.objects(ctx, "api")
		if err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
			return fmt.Errorf("replicas %v", d.Spec.Replicas)
		}
		dep = d
		return nil
	})
	if g := c.guest("api"); g.Guest.Observed.State != "starting" || !strings.Contains(g.Guest.Observed.Message, "0/1 ready") {
		t.Errorf("observed before a pod = %+v, want starting, 0/1 ready", g.Guest.Observed)
	}
	if _, err := k8stest.SimulateReadyPod(ctx, c.kube.Client, dep, "10.244.1.5"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "api observed running", func() error {
		g := c.guest("api")
		if g.Guest.Observed.State != "running" || !strings.Contains(g.Guest.Observed.Message, "1/1 ready") {
			return fmt.Errorf("observed %+v", g.Guest.Observed)
		}
		return nil
	})
	out := c.mustCLI("guest", "show", "api")
	if !strings.Contains(out, "1/1 ready") {
		t.Errorf("guest show does not show the observed pods:\n%s", out)
	}
	// Exec goes coordinator -> agent -> the API server's exec
	// subresource. The simulated pod has no node and no kubelet, so the
	// API server's refusal must come back, not a made-up success.
	if _, errOut, code := c.cli("guest", "exec", "api", "--", "true"); code == 0 || !strings.Contains(errOut, "does not have a host assigned") {
		t.Errorf("guest exec with no kubelet = exit %d, %q; want the API server's refusal", code, errOut)
	}

	// Drift: the Service deleted and the image changed by hand.
	if err := c.kube.Client.CoreV1().Services(c.ns).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	dep, _, _ = c.objects(ctx, "api")
	dep.Spec.Template.Spec.Containers[0].Image = "evil.example/other:latest"
	if _, err := c.kube.Client.AppsV1().Deployments(c.ns).Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "drift repaired", func() error {
		d, svc, err := c.objects(ctx, "api")
		switch {
		case err != nil:
			return err
		case !svc:
			return errors.New("service missing")
		case d.Spec.Template.Spec.Containers[0].Image != "registry.example/app:1.0":
			return fmt.Errorf("image %s", d.Spec.Template.Spec.Containers[0].Image)
		}
		return nil
	})

	// Update in place: the Deployment rolls to the new image and limits.
	hash := dep.Annotations["corpus.dev/spec-hash"]
	start = time.Now()
	c.mustCLI("guest", "update", "api", "--image", "registry.example/app:1.1", "--memory", "512M")
	eventually(t, 30*time.Second, "api rolled to 1.1", func() error {
		d, _, err := c.objects(ctx, "api")
		switch {
		case err != nil:
			return err
		case d.Spec.Template.Spec.Containers[0].Image != "registry.example/app:1.1":
			return fmt.Errorf("image %s", d.Spec.Template.Spec.Containers[0].Image)
		case d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value() != 512<<20:
			return fmt.Errorf("memory limit %s", d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory())
		case d.Annotations["corpus.dev/spec-hash"] == hash:
			return errors.New("spec hash unchanged")
		}
		return nil
	})
	t.Logf("guest update --image -> Deployment carries it: %s", time.Since(start).Round(time.Millisecond))
	if g := c.guest("api"); g.Guest.Spec.Image != "registry.example/app:1.1" {
		t.Errorf("guest show after update: image %q, want registry.example/app:1.1", g.Guest.Spec.Image)
	}
	var upd struct{ Changed bool }
	if err := c.json(&upd, "guest", "update", "api", "--image", "registry.example/app:1.1"); err != nil || upd.Changed {
		t.Errorf("the same update again = %+v, %v; want unchanged", upd, err)
	}
	if _, errOut, code := c.cli("guest", "update", "api", "--memory", "1K"); code == 0 || !strings.Contains(errOut, "below the minimum") {
		t.Errorf("guest update --memory 1K = exit %d, %q; want a refusal", code, errOut)
	}

	// A route with no IngressClass in the cluster: the agent's proxy
	// serves it, at the Service's cluster IP and port. No kube-proxy runs
	// here: the test listens on that loopback cluster IP itself
	// (simulated kube-proxy + pod).
	svc, err := c.kube.Client.CoreV1().Services(c.ns).Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "8080"))
	if err != nil {
		t.Fatalf("standing in for kube-proxy on %s: %v", svc.Spec.ClusterIP, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "api via service %s, host %s", svc.Spec.ClusterIP, r.Host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c.mustCLI("guest", "expose", "api", "--proxy", "--domain", "api.example.test", "--port", "8080")
	eventually(t, 30*time.Second, "api reached through the proxy", func() error {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+c.proxy+"/", nil)
		req.Host = "api.example.test"
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || !strings.Contains(string(b), "api via service "+svc.Spec.ClusterIP) {
			return fmt.Errorf("status %d: %s", res.StatusCode, b)
		}
		return nil
	})
	if list, err := c.kube.Client.NetworkingV1().Ingresses(c.ns).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("ingresses without an ingress class: %v, %v; want none", list, err)
	}

	// With an IngressClass the route becomes an Ingress (no controller
	// runs: the object is checked, not traffic through it).
	if _, err := c.kube.Client.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "test-nginx"}, Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 45*time.Second, "ingress of api.example.test", func() error {
		list, err := c.kube.Client.NetworkingV1().Ingresses(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "corpus.dev/guest=api"})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d ingresses", len(list.Items))
		}
		ing := list.Items[0]
		r := ing.Spec.Rules
		if *ing.Spec.IngressClassName != "test-nginx" || len(r) != 1 || r[0].Host != "api.example.test" ||
			r[0].HTTP.Paths[0].Backend.Service.Name != "api" || r[0].HTTP.Paths[0].Backend.Service.Port.Number != 8080 {
			return fmt.Errorf("ingress %+v", ing.Spec)
		}
		return nil
	})

	// The route deleted: its Ingress goes.
	c.mustCLI("ingress", "delete", "--domain", "api.example.test")
	eventually(t, 30*time.Second, "ingress of api.example.test deleted", func() error {
		list, err := c.kube.Client.NetworkingV1().Ingresses(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			return fmt.Errorf("%d ingresses (%v)", len(list.Items), err)
		}
		return nil
	})

	// A second guest on the same port fits: ports live on each guest's
	// Service, not on a node.
	c.mustCLI("guest", "create", "web", "--driver", "kubernetes", "--image", "nginx:1.27", "--memory", "128M", "--port", "8080", "--detach")
	eventually(t, 30*time.Second, "deployment and service of web", func() error {
		_, _, err := c.objects(ctx, "web")
		return err
	})

	// Collection: a Deployment with corpus's labels for a guest nobody
	// wants goes; the same in namespace default stays.
	ghost := dep.DeepCopy()
	ghost.ObjectMeta = metav1.ObjectMeta{Name: "ghost", Namespace: c.ns, Labels: map[string]string{
		"app.kubernetes.io/managed-by": "corpus", "corpus.dev/guest-id": "0000000000000bad", "corpus.dev/guest": "ghost",
	}}
	ghost.Spec.Selector.MatchLabels = map[string]string{"corpus.dev/guest-id": "0000000000000bad"}
	ghost.Spec.Template.Labels = ghost.Labels
	if _, err := c.kube.Client.AppsV1().Deployments(c.ns).Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	outside := ghost.DeepCopy()
	outside.Namespace = "default"
	if _, err := c.kube.Client.AppsV1().Deployments("default").Create(ctx, outside, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "ghost collected", func() error {
		_, err := c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, "ghost", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("ghost still there (%v)", err)
		}
		return nil
	})
	if _, err := c.kube.Client.AppsV1().Deployments("default").Get(ctx, "ghost", metav1.GetOptions{}); err != nil {
		t.Errorf("the look-alike in namespace default was touched: %v", err)
	}

	// A bad image reference: the driver refuses it for good (observed
	// failed, with the reason) and writes nothing to the cluster.
	c.mustCLI("guest", "create", "bad", "--driver", "kubernetes", "--image", "Registry/App::1", "--detach")
	eventually(t, 30*time.Second, "bad observed failed", func() error {
		g := c.guest("bad")
		if g.Guest.Observed.State != "failed" || !strings.Contains(g.Guest.Observed.Message, "not an image reference") {
			return fmt.Errorf("observed %+v", g.Guest.Observed)
		}
		return nil
	})
	if _, err := c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment of a refused guest: %v, want not found", err)
	}

	// A guest with a volume gets a claim, mounted by the pod of a
	// StatefulSet (no Deployment).
	c.mustCLI("guest", "create", "data", "--driver", "kubernetes", "--image", "postgres:17", "--volume", "1G", "--detach")
	eventually(t, 30*time.Second, "claim of data", func() error {
		claim, err := c.kube.Client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if size := claim.Spec.Resources.Requests.Storage(); size.Value() != 1<<30 {
			return fmt.Errorf("claim size %s, want 1Gi", size)
		}
		set, err := c.kube.Client.AppsV1().StatefulSets(c.ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("statefulset of data: %v", err)
		}
		if m := set.Spec.Template.Spec.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != "/srv/data" {
			return fmt.Errorf("mounts %v, want the claim at /srv/data", m)
		}
		if v := set.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].PersistentVolumeClaim == nil || v[0].PersistentVolumeClaim.ClaimName != "data" {
			return fmt.Errorf("volumes %v, want claim data", v)
		}
		if set.Spec.Replicas == nil || *set.Spec.Replicas != 1 {
			return fmt.Errorf("replicas %v, want 1 (started)", set.Spec.Replicas)
		}
		if _, err := c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, "data", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("deployment of a volume guest: %v", err)
		}
		return nil
	})

	// The volume's state comes from its claim: pending here, as nothing
	// provisions volumes in the test cluster.
	eventually(t, 30*time.Second, "volume data observed", func() error {
		out := c.mustCLI("volume", "show", "data")
		if !strings.Contains(out, "claim "+c.ns+"/data Pending") {
			return fmt.Errorf("volume show says %q", out)
		}
		return nil
	})

	// A registry with a login: the cluster's kubelets get its
	// credentials as an image pull secret the guest references, which
	// follows the login (within the driver's reuse of an answer, 10s,
	// and the agent's next pass).
	if _, stderr, code := c.cliStdin("s3cret-pw\n", "registry", "login", "registry.example", "-u", "ci", "--password-stdin"); code != 0 {
		t.Fatalf("registry login: %s", stderr)
	}
	c.mustCLI("guest", "create", "priv", "--driver", "kubernetes", "--image", "registry.example/team/app:2", "--memory", "64M", "--detach")
	var pullSecret string
	eventually(t, 30*time.Second, "priv's pull secret", func() error {
		d, err := c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, "priv", metav1.GetOptions{})
		if err != nil {
			return err
		}
		refs := d.Spec.Template.Spec.ImagePullSecrets
		if len(refs) != 1 {
			return fmt.Errorf("pull secrets %v, want one", refs)
		}
		sec, err := c.kube.Client.CoreV1().Secrets(c.ns).Get(ctx, refs[0].Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if sec.Type != corev1.SecretTypeDockerConfigJson || sec.Annotations["corpus.dev/registry"] != "registry.example" ||
			!strings.Contains(string(sec.Data[corev1.DockerConfigJsonKey]), `"registry.example":{`) ||
			!strings.Contains(string(sec.Data[corev1.DockerConfigJsonKey]), `"password":"s3cret-pw"`) {
			return fmt.Errorf("pull secret %s: type %s, annotations %v, %d bytes of config", sec.Name, sec.Type, sec.Annotations, len(sec.Data[corev1.DockerConfigJsonKey]))
		}
		pullSecret = sec.Name
		return nil
	})
	c.mustCLI("registry", "logout", "registry.example")
	c.mustCLI("guest", "update", "priv", "--memory", "96M")
	eventually(t, 30*time.Second, "priv without its pull secret after the logout", func() error {
		d, err := c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, "priv", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if refs := d.Spec.Template.Spec.ImagePullSecrets; len(refs) != 0 {
			return fmt.Errorf("pull secrets %v, want none", refs)
		}
		if _, err := c.kube.Client.CoreV1().Secrets(c.ns).Get(ctx, pullSecret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the pull secret after the logout: %v", err)
		}
		return nil
	})

	c.mustCLI("guest", "delete", "api")
	eventually(t, 30*time.Second, "api removed from the cluster", func() error {
		if _, _, err := c.objects(ctx, "api"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("objects of api: %v", err)
		}
		return nil
	})
}
