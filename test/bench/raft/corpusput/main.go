// Command corpusput is the corpus side of the write benchmark
// (test/bench/raft/run): it sends --total writes through the public API
// from --clients concurrent clients, spread over the coordinators of
// --endpoints, and prints what etcd's `benchmark put` prints of its own
// run: requests per second and latency percentiles. A write is a DNS
// record added under a name of its own (DnsService.AddRecord): one Raft
// entry, or a place in the leader's next batch entry when others arrive
// while one is committing (etcd batches its proposals likewise),
// acknowledged once applied, as an etcd put is once committed.
package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7400", "coordinator API addresses, comma-separated")
	clients := flag.Int("clients", 1, "concurrent clients (each its own connection)")
	total := flag.Int("total", 2000, "writes in all")
	tokenFile := flag.String("token-file", "", "operator token file")
	caFile := flag.String("ca", "", "cluster CA certificate")
	prefix := flag.String("prefix", "w", "record names are PREFIX-N")
	flag.Parse()
	if err := run(strings.Split(*endpoints, ","), *clients, *total, *tokenFile, *caFile, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "corpusput:", err)
		os.Exit(1)
	}
}

// put adds one record. A write refused while the group elects a leader
// (a busy host's replicas miss heartbeats) is sent again, as the CLI's
// client waits out an election; a write sent again that finds its record
// was done the first time. The latency counts the wait.
func put(api corpusv1connect.DnsServiceClient, name string) error {
	again := false
	for try := 0; ; try++ {
		_, err := api.AddRecord(context.Background(), connect.NewRequest(&corpusv1.AddRecordRequest{Name: name, Type: "TXT", Data: "v"}))
		switch {
		case err == nil, again && connect.CodeOf(err) == connect.CodeAlreadyExists:
			return nil
		case connect.CodeOf(err) != connect.CodeUnavailable || try == 100:
			return err
		}
		again = true
		retries.Add(1)
		time.Sleep(50 * time.Millisecond)
	}
}

// retries counts writes sent again during an election.
var retries atomic.Int64

func run(endpoints []string, clients, total int, tokenFile, caFile, prefix string) error {
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	ca, err := pki.ParseCert(b)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, total)
		failed    atomic.Int64
		wg        sync.WaitGroup
	)
	start := time.Now()
	for c := 0; c < clients; c++ {
		// A transport per client, as etcd's benchmark gives each client
		// its connection (--conns = --clients).
		hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: pki.ClientConfig(pool, nil, pki.RoleCoordinator, "")}}
		api := corpusv1connect.NewDnsServiceClient(hc, rpc.BaseURL(endpoints[c%len(endpoints)]),
			connect.WithInterceptors(rpc.Bearer(strings.TrimSpace(string(token)))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(total) {
					return
				}
				t0 := time.Now()
				err := put(api, fmt.Sprintf("%s-%d", prefix, n))
				d := time.Since(t0)
				if err != nil {
					if failed.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "corpusput: first failure:", err)
					}
					continue
				}
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	fmt.Printf("Total: %.4f secs.\n", took.Seconds())
	fmt.Printf("Requests/sec: %.4f\n", float64(len(latencies))/took.Seconds())
	fmt.Printf("Failed: %d\n", failed.Load())
	fmt.Printf("Retried during elections: %d\n", retries.Load())
	fmt.Printf("50%% in %.4f secs.\n99%% in %.4f secs.\n", pct(0.5).Seconds(), pct(0.99).Seconds())
	if failed.Load() > 0 {
		return fmt.Errorf("%d writes failed", failed.Load())
	}
	return nil
}
