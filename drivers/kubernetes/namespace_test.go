package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"corpus/internal/k8stest"
	"corpus/internal/testrun"
)

// testNamespaceOnce starts many guests' Creates at once on a driver whose
// namespace does not exist yet, as an agent's start does: the namespace is
// read and its service account written once, not once per guest (each
// would spend the client's rate limit before any guest's own request).
func testNamespaceOnce(t *testing.T, c *k8stest.Cluster) {
	const guests = 24
	var nsReads, saWrites atomic.Int32
	rc := rest.CopyConfig(c.Config)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/corpus-nsonce":
				nsReads.Add(1)
			case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/corpus-nsonce/serviceaccounts":
				saWrites.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	d, err := New(Config{REST: rc, NamespacePrefix: "corpus-", Node: "nsonce"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(2*time.Minute))
	defer cancel()

	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, guests)
	for i := range guests {
		wg.Go(func() {
			<-start
			errs[i] = d.Create(ctx, spec(fmt.Sprintf("bbbb%012d", i), fmt.Sprintf("g%d", i)), nil)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Create(g%d) = %v", i, err)
		}
	}
	if n, m := nsReads.Load(), saWrites.Load(); n != 1 || m != 1 {
		t.Errorf("%d Creates at once read the namespace %d times and wrote its service account %d times, want once each", guests, n, m)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
