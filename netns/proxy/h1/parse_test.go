package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// FuzzParseRequest checks ParseRequest against net/http's parser: a head
// the lean path accepts, net/http accepts too, with the same method, Host,
// target and framing; and what goes on to the target parses as well.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n",
		"POST /a?b=c HTTP/1.1\r\nHost: App.Test:8080\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n",
		"PUT /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
		"GET /%41 HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\nForwarded: for=x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		var r Request
		if !ParseRequest(head, &r) {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("ParseRequest accepts %q, net/http does not: %v", head, err)
		}
		if req.Method != string(r.Method) || req.Host != string(r.Host) || req.RequestURI != string(r.Out[len(r.Method)+1:bytes.IndexByte(r.Out, '\n')-len(" HTTP/1.1\r")]) {
			t.Errorf("%q: lean %q %q, net/http %q %q %q", head, r.Method, r.Host, req.Method, req.Host, req.RequestURI)
		}
		if req.ContentLength != max(r.Length, 0) && !r.Chunked || r.Chunked != (len(req.TransferEncoding) == 1) {
			t.Errorf("%q: lean length %d chunked %v, net/http %d %v", head, r.Length, r.Chunked, req.ContentLength, req.TransferEncoding)
		}
		if r.Close != req.Close {
			t.Errorf("%q: lean close %v, net/http %v", head, r.Close, req.Close)
		}
		out := append(append([]byte{}, r.Out...), "X-Forwarded-For: 127.0.0.1\r\n\r\n"...)
		sent, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(out)))
		if err != nil {
			t.Fatalf("%q goes on as %q, which does not parse: %v", head, out, err)
		}
		for _, h := range []string{"Connection", "Upgrade", "Forwarded", "Keep-Alive", "Proxy-Connection"} {
			if v := sent.Header.Get(h); v != "" {
				t.Errorf("%q goes on with %s: %s", head, h, v)
			}
		}
	})
}

// FuzzParseResponse checks ParseResponse against net/http's parser.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nConnection: close, X-A\r\nX-A: 1\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: x\r\n\r\n",
		"HTTP/1.1 103\r\nLink: <a>\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		var r Response
		if !ParseResponse(head, &r) {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: "GET"})
		if err != nil {
			if strings.Contains(err.Error(), "malformed HTTP status code") || strings.Contains(err.Error(), "invalid") {
				return // net/http is stricter about some status lines and values
			}
			t.Fatalf("ParseResponse accepts %q, net/http does not: %v", head, err)
		}
		if resp.StatusCode != r.Status || r.Chunked != (len(resp.TransferEncoding) == 1) {
			t.Errorf("%q: lean %d chunked %v, net/http %d %v", head, r.Status, r.Chunked, resp.StatusCode, resp.TransferEncoding)
		}
	})
}
