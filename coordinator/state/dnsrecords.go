package state

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// addDNSRecord adds an operator record; the API has validated its form,
// the state keeps keys unique and refuses a record the zone could not
// serve beside the others: a name with a CNAME holds no other record
// (RFC 1034 section 3.6.2), so a CNAME goes only to a name without
// records and no record to a name with a CNAME (ErrConflict). Checked
// here, every way a record comes in is checked.
func (a *applier) addDNSRecord(c *corpusv1.AddDnsRecord) error {
	r := c.Record
	if r == nil || r.Id == "" || r.Key == "" {
		return fmt.Errorf("dns record without id or key: %w", ErrInvalid)
	}
	if a.get(statedb.TableDNS, "id", r.Id) != nil {
		return fmt.Errorf("dns record id %s: %w", r.Id, ErrExists)
	}
	if a.get(statedb.TableDNS, "key", r.Key) != nil {
		return fmt.Errorf("dns record %q: %w", r.Key, ErrExists)
	}
	it, err := a.txn.Get(statedb.TableDNS, "name", r.Name)
	if err != nil {
		panic(fmt.Sprintf("state: reading %s: %v", statedb.TableDNS, err))
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if o := raw.(*corpusv1.DnsRecord); r.Type == "CNAME" || o.Type == "CNAME" {
			return fmt.Errorf("dns record %s %s %s: %s has a %s record (%s, id %s), and a name with a CNAME holds no other record; delete that one first: %w",
				r.Name, r.Type, r.Data, o.Name, o.Type, o.Data, o.Id, ErrConflict)
		}
	}
	r = proto.Clone(r).(*corpusv1.DnsRecord)
	r.CreatedAt = a.now
	r.CreateIndex, r.ModifyIndex = a.index, a.index
	a.put(statedb.TableDNS, r)
	return nil
}

func (a *applier) deleteDNSRecord(c *corpusv1.DeleteDnsRecord) error {
	raw := a.get(statedb.TableDNS, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("dns record %s: %w", c.Id, ErrNotFound)
	}
	if err := a.txn.Delete(statedb.TableDNS, raw); err != nil {
		panic(fmt.Sprintf("state: deleting dns record: %v", err))
	}
	return nil
}
