package kubernetes

import (
	"errors"

	"k8s.io/client-go/discovery"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// clients are the typed clients of the API groups the driver uses, under
// the method names of client-go's Clientset. The whole Clientset, and the
// informer factory over it, would link the clients, informers, listers
// and apply configurations of every group Kubernetes serves into the one
// corpus binary, whose every process maps them whether or not it runs
// this driver.
type clients struct {
	core      *corev1client.CoreV1Client
	apps      *appsv1client.AppsV1Client
	net       *networkingv1client.NetworkingV1Client
	storage   *storagev1client.StorageV1Client
	discovery *discovery.DiscoveryClient
}

// newClients makes the clients of rc as kubernetes.NewForConfig does:
// one HTTP client (one connection pool) and one rate limiter for all.
func newClients(rc *rest.Config) (*clients, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	c := *rc
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, errors.New("burst must be above 0 when QPS is")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	var cs clients
	var errs [5]error
	cs.core, errs[0] = corev1client.NewForConfigAndClient(&c, hc)
	cs.apps, errs[1] = appsv1client.NewForConfigAndClient(&c, hc)
	cs.net, errs[2] = networkingv1client.NewForConfigAndClient(&c, hc)
	cs.storage, errs[3] = storagev1client.NewForConfigAndClient(&c, hc)
	cs.discovery, errs[4] = discovery.NewDiscoveryClientForConfigAndClient(&c, hc)
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return &cs, nil
}

func (c *clients) CoreV1() corev1client.CoreV1Interface                   { return c.core }
func (c *clients) AppsV1() appsv1client.AppsV1Interface                   { return c.apps }
func (c *clients) NetworkingV1() networkingv1client.NetworkingV1Interface { return c.net }
func (c *clients) StorageV1() storagev1client.StorageV1Interface          { return c.storage }
func (c *clients) Discovery() discovery.DiscoveryInterface                { return c.discovery }
