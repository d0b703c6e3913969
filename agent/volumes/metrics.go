package volumes

import (
	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// Collector exports the size and use of this node's volumes, as
// the agent last observed them, at scrape time. The volume label is
// bounded by the volumes the cluster gave the node.
type collector struct {
	m          *Manager
	size, used *prometheus.Desc
}

func Collector(m *Manager) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "volume", name), help, []string{"volume"}, nil)
	}
	return &collector{m: m,
		size: d("size_bytes", "Size of the volume's file system as observed on the node."),
		used: d("used_bytes", "Bytes used in the volume's file system as observed on the node (or reported by its guest)."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.size; ch <- c.used }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, o := range c.m.sizes() {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(o.Size), o.Name)
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(o.Used), o.Name)
	}
}
