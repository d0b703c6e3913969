package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// TestKubernetesScale measures the kubernetes driver through the whole
// path (test/bench/k8s/run runs it; it is skipped unless
// CORPUS_BENCH_K8S is set, being a measurement, not a check):
//
//   - create latency: `corpus guest create` (the CLI process) until the
//     guest's Deployment and Service exist in the API server;
//   - update latency: `corpus guest update --image` (the CLI process)
//     until the guest's Deployment carries the new image;
//   - reconcile after an agent restart: CORPUS_BENCH_K8S_GUESTS guests
//     (default 500) exist; the agent is killed, every Service is deleted
//     by hand meanwhile, and the agent started again: the time until all
//     Services are back is one full reconcile of every guest (inspect,
//     compare, repair) plus the agent's start.
func TestKubernetesScale(t *testing.T) {
	if os.Getenv("CORPUS_BENCH_K8S") == "" {
		t.Skip("a measurement: set CORPUS_BENCH_K8S=1 (test/bench/k8s/run does)")
	}
	n := 500
	if v, err := strconv.Atoi(os.Getenv("CORPUS_BENCH_K8S_GUESTS")); err == nil && v > 0 {
		n = v
	}
	c := newK8sCluster(t, "bench", "memory=1T,cpus=1000,disk=1T")
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(20*time.Minute))
	defer cancel()
	services := c.kube.Client.CoreV1().Services(c.ns)

	// Create latency through the CLI, one guest at a time.
	var lat []time.Duration
	for i := range 10 {
		name := fmt.Sprintf("lat%d", i)
		start := time.Now()
		c.mustCLI("guest", "create", name, "--driver", "kubernetes", "--image", "registry.example/app:1.0",
			"--memory", "64M", "--cpus", "10m", "--disk", "32M", "--port", "8080", "--detach")
		eventually(t, time.Minute, name+" objects", func() error {
			_, _, err := c.objects(ctx, name)
			return err
		})
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("RESULT create_to_objects_ms min=%d median=%d max=%d (n=%d, CLI process included)",
		lat[0].Milliseconds(), lat[len(lat)/2].Milliseconds(), lat[len(lat)-1].Milliseconds(), len(lat))

	// Update latency through the CLI: `corpus guest update --image`
	// until the Deployment's pod template carries the image.
	lat = lat[:0]
	for i := range 10 {
		img := fmt.Sprintf("registry.example/app:1.%d", i+1)
		start := time.Now()
		c.mustCLI("guest", "update", "lat0", "--image", img)
		eventually(t, time.Minute, "lat0 at "+img, func() error {
			d, err := c.kube.Client.AppsV1().Deployments(c.ns).Get(ctx, "lat0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := d.Spec.Template.Spec.Containers[0].Image; got != img {
				return fmt.Errorf("image %s", got)
			}
			return nil
		})
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("RESULT update_image_to_deployment_ms min=%d median=%d max=%d (n=%d, CLI process included)",
		lat[0].Milliseconds(), lat[len(lat)/2].Milliseconds(), lat[len(lat)-1].Milliseconds(), len(lat))

	// Many guests through the API, eight requests at a time.
	guests := corpusv1connect.NewGuestServiceClient(tlsIn(t, "", c.ca), "https://"+c.api,
		connect.WithInterceptors(rpc.Bearer(c.token), rpc.RetryWithoutLeader(10*time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{
				Name: fmt.Sprintf("g%d", i),
				Spec: &corpusv1.GuestSpec{
					Driver: "kubernetes", Image: "registry.example/app:1.0",
					Resources: &corpusv1.Resources{MemoryBytes: 64 << 20, CpuMillis: 10, DiskBytes: 32 << 20},
					Ports:     []*corpusv1.Port{{HostPort: 8080, GuestPort: 8080, Protocol: "tcp"}},
				},
			}))
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := n + len(lat)
	countServices := func() int {
		list, err := services.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=corpus"})
		if err != nil {
			return -1
		}
		return len(list.Items)
	}
	eventually(t, 10*time.Minute, "every guest's objects", func() error {
		if got := countServices(); got != total {
			return fmt.Errorf("%d of %d services", got, total)
		}
		return nil
	})
	t.Logf("RESULT create_%d_guests_to_objects_s=%.1f (API, 8 concurrent requests)", n, time.Since(start).Seconds())

	// The Services exist before the agent's creates end (each create
	// waits to see its objects in its watch); a kill then would make
	// the restart settle interrupted creates, not reconcile finished
	// guests. So wait until the agent has reported every guest past
	// creating (no kubelet here: its pods never run, so starting).
	eventually(t, 10*time.Minute, "every guest's create finished", func() error {
		list, err := guests.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{}))
		if err != nil {
			return err
		}
		busy := 0
		for _, g := range list.Msg.Guests {
			switch g.Guest.GetObserved().GetState() {
			case "", corpusv1.ObservedCreating:
				busy++
			case corpusv1.ObservedFailed:
				return fmt.Errorf("guest %s failed: %s", g.Guest.GetName(), g.Guest.GetObserved().GetMessage())
			}
		}
		if busy > 0 || len(list.Msg.Guests) != total {
			return fmt.Errorf("%d of %d guests still being created", busy, len(list.Msg.Guests))
		}
		return nil
	})

	// Restart: kill the agent, delete every Service behind its back,
	// start it again from its state folder.
	c.agent.kill()
	if err := deleteServices(ctx, c); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	c.agent = c.agent.restart(t)
	eventually(t, 15*time.Minute, "every service repaired", func() error {
		if got := countServices(); got != total {
			return fmt.Errorf("%d of %d services", got, total)
		}
		return nil
	})
	t.Logf("RESULT reconcile_%d_guests_after_restart_s=%.1f (agent start, inspect and repair of every guest)", total, time.Since(start).Seconds())
}

func deleteServices(ctx context.Context, c *k8sCluster) error {
	api := c.kube.Client.CoreV1().Services(c.ns)
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=corpus"})
	if err != nil {
		return err
	}
	for _, s := range list.Items {
		if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	return nil
}
