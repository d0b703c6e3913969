package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"corpus/netns/proxy/h1"
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

// BenchmarkProxyRaw measures the proxy alone: a client and a target that
// allocate nothing per request, so -benchmem shows the proxy's own
// allocations per request. "lean" is the lean HTTP/1.1 path, "net/http"
// the same requests on connections handed over to net/http (the first
// request of each names a header in Connection, which the lean path leaves
// to net/http).
func BenchmarkProxyRaw(b *testing.B) {
	const body = "hello from the bench backend\n"
	target := rawBackend(b, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	p := startProxy(b, Config{})
	mustSetRoutes(b, p, httpRoutes("bench.test", target))
	for _, tc := range []struct{ name, first string }{
		{"lean", ""},
		{"net/http", "Connection: keep-alive, X-Hand-Over\r\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", p.HTTPAddr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				r := bufio.NewReader(c)
				req := []byte("GET / HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
				first := []byte("GET / HTTP/1.1\r\nHost: bench.test\r\n" + tc.first + "\r\n")
				for i := 0; pb.Next(); i++ {
					out := req
					if i == 0 {
						out = first
					}
					if _, err := c.Write(out); err != nil {
						b.Error(err)
						return
					}
					if err := readRawAnswer(r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// readRawAnswer reads a 200 answer with a Content-Length, allocating
// nothing.
func readRawAnswer(r *bufio.Reader) error {
	length := -1
	for n := 0; ; n++ {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if n == 0 && !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			return fmt.Errorf("answer %q", line)
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && h1.EqualFold(k, "content-length") {
			length = int(h1.ParseLength(h1.TrimOWS(bytes.TrimRight(v, "\r\n"))))
		}
	}
	if length < 0 {
		return errors.New("answer without Content-Length")
	}
	_, err := r.Discard(length)
	return err
}
