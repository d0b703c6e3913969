// Command backend is the target of the proxy benchmark: it answers every
// request with the same small body. It prints its listen address on the
// first line of its output and serves until it is killed.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	body := []byte("hello from the corpus proxy bench backend\n")
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("backend: %v", err)
	}
	fmt.Println(ln.Addr())
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		}),
	}
	log.Fatal(srv.Serve(ln))
}
