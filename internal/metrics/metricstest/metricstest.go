// Package metricstest reads single values out of a Prometheus gatherer,
// for tests that check metrics move.
package metricstest

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
		if mf.GetName() == name {
			return match(mf, labels)
		}
	}
	return nil
}

// match returns the series of a family whose labels include the pairs
// of labels, or nil.
func match(mf *dto.MetricFamily, labels []string) *dto.Metric {
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
	return nil
}

// value is a counter's, a gauge's or an untyped series' value; NaN for
// other kinds.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

// Value returns the value of the counter or gauge series of name with
// labels; 0 when there is no such series (a counter not yet counted).
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := find(t, g, name, labels...)
	if m == nil {
		return 0
	}
	v := value(m)
	if math.IsNaN(v) {
		t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	}
	return v
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

// Text is what a scrape of g serves, in the text format.
func Text(t testing.TB, g prometheus.Gatherer) []byte {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatalf("encoding %s: %v", mf.GetName(), err)
		}
	}
	return b.Bytes()
}

// Exposed reads the series of the family name whose labels include the
// pairs of labels out of an exposition in the text format (what Scrape
// returns) and says whether it is there at all: a series that reads 0
// is not one that is missing.
func Exposed(t testing.TB, exposition []byte, name string, labels ...string) (float64, bool) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	f := fams[name]
	if f == nil {
		return 0, false
	}
	m := match(f, labels)
	if m == nil {
		return 0, false
	}
	return value(m), true
}
