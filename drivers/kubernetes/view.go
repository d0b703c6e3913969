package kubernetes

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	netlisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
)

// view is the driver's read side: informers (one list, then a watch)
// over the objects of its namespace that carry corpus's label. Inspect,
// List and the comparisons of Create read memory, so a resync of many
// guests costs the API server nothing unless something changed; writes go
// to the API server. The view lags the server by a watch event: a write
// based on a stale object meets a conflict and is redone from a fresh
// read, and an object the view does not show yet is read from the server
// when creating it finds it there.
type view struct {
	informers sync.WaitGroup // the informers' goroutines, until d.stop closes
	deps      appslisters.DeploymentNamespaceLister
	sets      appslisters.StatefulSetNamespaceLister
	svcs      corelisters.ServiceNamespaceLister
	pods      corelisters.PodNamespaceLister
	claims    corelisters.PersistentVolumeClaimNamespaceLister
	ings      netlisters.IngressNamespaceLister
	synced    []cache.InformerSynced
}

// view returns the driver's view, started on first use, once it holds a
// complete first listing.
func (d *Driver) view(ctx context.Context) (*view, error) {
	d.viewMu.Lock()
	v := d.v
	if v == nil {
		v = &view{}
		c := d.client
		deps := watchManaged(v, d.stop, c.AppsV1().Deployments(d.ns), &appsv1.Deployment{})
		sets := watchManaged(v, d.stop, c.AppsV1().StatefulSets(d.ns), &appsv1.StatefulSet{})
		svcs := watchManaged(v, d.stop, c.CoreV1().Services(d.ns), &corev1.Service{})
		pods := watchManaged(v, d.stop, c.CoreV1().Pods(d.ns), &corev1.Pod{})
		claims := watchManaged(v, d.stop, c.CoreV1().PersistentVolumeClaims(d.ns), &corev1.PersistentVolumeClaim{})
		ings := watchManaged(v, d.stop, c.NetworkingV1().Ingresses(d.ns), &networkingv1.Ingress{})
		v.deps = appslisters.NewDeploymentLister(deps.GetIndexer()).Deployments(d.ns)
		v.sets = appslisters.NewStatefulSetLister(sets.GetIndexer()).StatefulSets(d.ns)
		v.svcs = corelisters.NewServiceLister(svcs.GetIndexer()).Services(d.ns)
		v.pods = corelisters.NewPodLister(pods.GetIndexer()).Pods(d.ns)
		v.claims = corelisters.NewPersistentVolumeClaimLister(claims.GetIndexer()).PersistentVolumeClaims(d.ns)
		v.ings = netlisters.NewIngressLister(ings.GetIndexer()).Ingresses(d.ns)
		d.v = v
	}
	d.viewMu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), v.synced...) {
		return nil, fmt.Errorf("listing namespace %s: %w", d.ns, context.Cause(ctx))
	}
	return v, nil
}

// listWatcher is the part of a typed client of one kind of object in one
// namespace that an informer uses.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, o metav1.ListOptions) (L, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// watchManaged starts an informer of v over the objects c lists that
// carry corpus's label (as client-go's informer factory does for one
// kind, without linking the factory's informers of every kind), running
// until stop closes.
func watchManaged[L runtime.Object](v *view, stop <-chan struct{}, c listWatcher[L], obj runtime.Object) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = managedSelector
			return c.List(context.TODO(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = managedSelector
			return c.Watch(context.TODO(), o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	v.synced = append(v.synced, inf.HasSynced)
	v.informers.Go(func() { inf.Run(stop) })
	return inf
}

// Close stops the driver's watches. The driver must not be used after.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.viewMu.Lock()
		defer d.viewMu.Unlock()
		if d.v != nil {
			d.v.informers.Wait()
		}
	})
	return nil
}

func selector(set map[string]string) labels.Selector {
	return labels.SelectorFromSet(set)
}

// guestPods are the pods of the guest with id, in sortPods order (copies:
// the caller may keep and sort them).
func (v *view) guestPods(id string) ([]corev1.Pod, error) {
	list, err := v.pods.List(selector(map[string]string{LabelGuestID: id}))
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Pod, 0, len(list))
	for _, p := range list {
		out = append(out, *p)
	}
	sortPods(out)
	return out, nil
}

// await waits, up to a few seconds, until the view shows the object get
// reads at resource version rv or later, or, with rv "", shows it gone:
// so the driver reads its own writes (a Create followed by an Inspect).
// A view still behind after that is left to catch up; nothing fails.
func await[T metav1.Object](ctx context.Context, get func() (T, error), rv string) {
	want, _ := strconv.ParseUint(rv, 10, 64)
	until(ctx, func() bool {
		o, err := get()
		if rv == "" || err != nil {
			return rv == "" && apierrors.IsNotFound(err)
		}
		got, perr := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
		return o.GetResourceVersion() == rv || perr == nil && got >= want
	})
}

// until polls done for up to five seconds.
func until(ctx context.Context, done func() bool) {
	deadline := time.Now().Add(5 * time.Second)
	for !done() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// gone reports whether the view holds no Deployment, StatefulSet,
// Service, Ingress or pod of the guest with id.
func (v *view) gone(id string) bool {
	sel := selector(map[string]string{LabelGuestID: id})
	deps, _ := v.deps.List(sel)
	sets, _ := v.sets.List(sel)
	svcs, _ := v.svcs.List(sel)
	ings, _ := v.ings.List(sel)
	pods, _ := v.pods.List(sel)
	return len(deps)+len(sets)+len(svcs)+len(ings)+len(pods) == 0
}
