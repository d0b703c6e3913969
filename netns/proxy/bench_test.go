package proxy

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkProxyHTTP measures a small GET through the proxy to a loopback
// target over keep-alive connections; BenchmarkDirectHTTP is the same
// request straight to the target, for comparison.
func BenchmarkProxyHTTP(b *testing.B) {
	be := startBackend(b, "bench", benchHandler())
	p := startProxy(b, Config{})
	mustSetRoutes(b, p, httpRoutes("bench.test", be.addr()))
	benchGet(b, p.HTTPAddr().String(), "bench.test")
}

func BenchmarkDirectHTTP(b *testing.B) {
	be := startBackend(b, "bench", benchHandler())
	benchGet(b, be.addr(), "bench.test")
}

func benchHandler() http.Handler {
	body := []byte("hello from the bench backend\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
}

func benchGet(b *testing.B, addr, host string) {
	c := proxyClient(b, addr, nil)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest("GET", "http://proxy.invalid/", nil)
		req.Host = host
		for pb.Next() {
			resp, err := c.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
