package statedb

import (
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// DNSRecords returns the operator records, by key.
func (v *Snap) DNSRecords() []*corpusv1.DnsRecord {
	out := all[*corpusv1.DnsRecord](v, TableDNS, "id")
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// DNSRecord returns the operator record with that id, or nil.
func (v *Snap) DNSRecord(id string) *corpusv1.DnsRecord {
	return first[*corpusv1.DnsRecord](v, TableDNS, "id", id)
}

// DNSRecordByKey returns the operator record with that key, or nil.
func (v *Snap) DNSRecordByKey(key string) *corpusv1.DnsRecord {
	return first[*corpusv1.DnsRecord](v, TableDNS, "key", key)
}

// DNSRecordsNamed returns the operator records owned by name (absolute,
// as DNS compares names: case aside), in no particular order.
func (v *Snap) DNSRecordsNamed(name string) []*corpusv1.DnsRecord {
	return all[*corpusv1.DnsRecord](v, TableDNS, "name", name)
}
