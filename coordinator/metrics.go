package coordinator

import (
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/coordinator/state"
	"corpus/internal/metrics"
	corpusv1 "corpus/proto/corpus/v1"
)

// raftCollector reads this replica's Raft state at scrape time.
type raftCollector struct {
	r                                          *replica
	leader, term, commit, applied, last, peers *prometheus.Desc
}

func newRaftCollector(r *replica) *raftCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "raft", name), help, nil, nil)
	}
	return &raftCollector{
		r:       r,
		leader:  d("leader", "1 when this replica is the Raft leader, else 0."),
		term:    d("term", "The current Raft term."),
		commit:  d("commit_index", "The index of the latest log entry known committed."),
		applied: d("applied_index", "The index of the latest log entry applied to this replica's state."),
		last:    d("last_log_index", "The index of the latest entry in this replica's log."),
		peers:   d("peers", "Voting members of the Raft group this replica knows, itself included."),
	}
}

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.term, c.commit, c.applied, c.last, c.peers} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r.raft
	st := r.Stats()
	num := func(key string) float64 {
		v, _ := strconv.ParseUint(st[key], 10, 64)
		return float64(v)
	}
	leader := 0.0
	if r.State() == raft.Leader {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, num("term"))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, num("commit_index"))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(r.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, float64(r.LastIndex()))
	// num_peers counts the others; the configuration is what is known.
	ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, num("num_peers")+1)
}

// newApplyHistogram times a write from Raft's Apply to its result here:
// replication to a quorum, commit and the state machine.
func newApplyHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: "raft", Name: "apply_duration_seconds",
		Help:    "Time from proposing a command to Raft until it is committed and applied on this replica (the leader).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
	})
}

// guestStates are the guest states exported; anything else is "other",
// so a driver's odd state never makes a new series.
var guestStates = map[string]bool{
	"pending": true, "placed": true, "other": true,
	corpusv1.ObservedCreating: true, corpusv1.ObservedStarting: true, corpusv1.ObservedRunning: true,
	corpusv1.ObservedStopping: true, corpusv1.ObservedStopped: true, corpusv1.ObservedFailed: true,
	corpusv1.ObservedDeleted: true,
}

// guestsCollector counts the cluster's guests by state and driver in
// this replica's copy of the state, at scrape time. Every state is
// exported for every driver the nodes offer (or a guest uses), 0 when no
// guest is in it: a series that vanished when its last guest left would
// read as "no data" where it means none, and break rates and alerts on
// it.
type guestsCollector struct {
	store *state.Store
	desc  *prometheus.Desc
}

func newGuestsCollector(store *state.Store) *guestsCollector {
	return &guestsCollector{store: store, desc: prometheus.NewDesc(
		prometheus.BuildFQName(metrics.Namespace, "", "guests"),
		"Guests of the cluster by state (pending: no node yet; placed: its agent has not reported it; else what the agent observed) and driver.",
		[]string{"state", "driver"}, nil)}
}

func (c *guestsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *guestsCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ state, driver string }
	counts := map[key]int{}
	view := c.store.Read()
	drivers := map[string]bool{}
	for _, n := range view.Nodes() {
		for _, d := range n.Drivers {
			drivers[d.Name] = true
		}
	}
	for _, g := range view.Guests() {
		st := g.GetObserved().GetState()
		switch {
		case g.NodeId == "":
			st = "pending"
		case st == "":
			st = "placed"
		case !guestStates[st]:
			st = "other"
		}
		d := g.GetSpec().GetDriver()
		drivers[d] = true
		counts[key{st, d}]++
	}
	for d := range drivers {
		for st := range guestStates {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[key{st, d}]), st, d)
		}
	}
}

// servicesCollector counts the cluster's services by template and state,
// and its backups by status, with the bytes of those kept and the age of
// each service's newest one, at scrape time.
type servicesCollector struct {
	store                                            *state.Store
	services, backups, backupBytes, ages, volumeAges *prometheus.Desc
}

func newServicesCollector(store *state.Store) *servicesCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", name), help, labels, nil)
	}
	return &servicesCollector{store: store,
		services:    d("services", "Services by template (external for an outside endpoint) and state (unknown before its agent reported it).", "template", "state"),
		backups:     d("backups", "Backups by status.", "status"),
		backupBytes: d("backups_kept_bytes", "Bytes of the backups that succeeded, as the nodes keep them."),
		ages:        d("service_last_backup_age_seconds", "Seconds since each service's newest backup that succeeded (absent when it has none).", "service"),
		volumeAges:  d("volume_last_backup_age_seconds", "Seconds since each volume's newest backup that succeeded (absent when it has none).", "volume"),
	}
}

func (c *servicesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.services
	ch <- c.backups
	ch <- c.backupBytes
	ch <- c.ages
	ch <- c.volumeAges
}

func (c *servicesCollector) Collect(ch chan<- prometheus.Metric) {
	view := c.store.Read()
	type key struct{ template, state string }
	counts := map[key]int{}
	for _, s := range view.Services() {
		k := key{s.Template, s.Observed.GetState()}
		if s.ExternalUrl != "" {
			k.template = "external"
		}
		if k.state == "" {
			k.state = "unknown"
		}
		counts[k]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.services, prometheus.GaugeValue, float64(n), k.template, k.state)
	}
	statuses := map[string]int{}
	var kept int64
	newest, newestVolume := map[string]time.Time{}, map[string]time.Time{}
	for _, b := range view.Backups("") {
		statuses[b.Status]++
		if b.Status != corpusv1.BackupSucceeded {
			continue
		}
		kept += b.SizeBytes
		of := newest
		if b.Volume != "" {
			of = newestVolume
		}
		if t := b.FinishedAt.AsTime(); t.After(of[b.Service+b.Volume]) {
			of[b.Service+b.Volume] = t
		}
	}
	for st, n := range statuses {
		ch <- prometheus.MustNewConstMetric(c.backups, prometheus.GaugeValue, float64(n), st)
	}
	ch <- prometheus.MustNewConstMetric(c.backupBytes, prometheus.GaugeValue, float64(kept))
	for svc, t := range newest {
		if view.Service(svc) != nil {
			ch <- prometheus.MustNewConstMetric(c.ages, prometheus.GaugeValue, time.Since(t).Seconds(), svc)
		}
	}
	for vol, t := range newestVolume {
		if view.Volume(vol) != nil {
			ch <- prometheus.MustNewConstMetric(c.volumeAges, prometheus.GaugeValue, time.Since(t).Seconds(), vol)
		}
	}
}
