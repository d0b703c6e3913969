// Package metricstest reads single values out of a Prometheus gatherer,
// for tests that check metrics move.
package metricstest

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// find returns the series of the family name whose labels include the
// pairs of labels (name, value, name, value, ...), or nil.
func find(t testing.TB, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

// Value returns the value of the counter or gauge series of name with
// labels; 0 when there is no such series (a counter not yet counted).
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := find(t, g, name, labels...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

// HistogramCount returns the observation count of the histogram series
// of name with labels; 0 when there is no such series.
func HistogramCount(t testing.TB, g prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	m := find(t, g, name, labels...)
	if m == nil {
		return 0
	}
	if m.Histogram == nil {
		t.Fatalf("%s%v is not a histogram", name, labels)
	}
	return m.Histogram.GetSampleCount()
}

// Promtool runs `promtool check metrics` on an exposition (what a scrape
// of /metrics returned) and fails the test on every problem it reports.
// Without promtool the test is skipped, unless
// CORPUS_TEST_REQUIRE_PROMETHEUS=1 makes that a failure.
func Promtool(t testing.TB, exposition []byte) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("promtool is missing (apt-get install prometheus) and CORPUS_TEST_REQUIRE_PROMETHEUS=1")
		}
		t.Skip("promtool is missing: apt-get install prometheus")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// Scrape GETs url (a /metrics endpoint) in the text format Prometheus
// asks for and returns the body.
func Scrape(t testing.TB, url string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s %v\n%s", url, res.Status, err, body)
	}
	return body
}
