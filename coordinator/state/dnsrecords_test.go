package state_test

import (
	"errors"
	"testing"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func addRecordCmd(id, name, typ, data string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_AddDnsRecord{AddDnsRecord: &corpusv1.AddDnsRecord{Record: &corpusv1.DnsRecord{
		Id: id, Name: name, Type: typ, Data: data, Key: name + " " + typ + " " + data,
	}}}}
}

// TestDNSRecordConflicts: the state machine refuses a record the zone
// could not serve beside those it has (a CNAME and other data at one
// name, names compared without case), whichever way it comes in; other
// records at the name, and the same records elsewhere, are accepted.
func TestDNSRecordConflicts(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(cluster()...)
	r.must(
		addRecordCmd("a1", "www.corpus.test.", "CNAME", "web.guest.corpus.test."),
		addRecordCmd("a2", "mail.corpus.test.", "A", "192.0.2.25"),
		addRecordCmd("a3", "mail.corpus.test.", "A", "192.0.2.26"),
		addRecordCmd("a4", "mail.corpus.test.", "TXT", `"v=spf1 -all"`),
	)
	for _, c := range []*corpusv1.Command{
		addRecordCmd("b1", "www.corpus.test.", "A", "10.0.0.9"),
		addRecordCmd("b2", "WWW.corpus.test.", "TXT", `"x"`),
		addRecordCmd("b3", "www.corpus.test.", "CNAME", "other.corpus.test."),
		addRecordCmd("b4", "mail.corpus.test.", "CNAME", "web.guest.corpus.test."),
	} {
		if err := r.apply(c); !errors.Is(err, state.ErrConflict) {
			t.Errorf("Apply(%v) = %v, want ErrConflict", c, err)
		}
		if rec := r.store.Read().DNSRecord(c.GetAddDnsRecord().Record.Id); rec != nil {
			t.Errorf("refused record %v is in the state", rec)
		}
	}
	r.must(addRecordCmd("c1", "docs.corpus.test.", "CNAME", "www.corpus.test."))
	// Once the CNAME is gone, its name takes other records.
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteDnsRecord{DeleteDnsRecord: &corpusv1.DeleteDnsRecord{Id: "a1"}}})
	r.must(addRecordCmd("c2", "www.corpus.test.", "A", "10.0.0.9"))
	if got := len(r.store.Read().DNSRecords()); got != 5 {
		t.Errorf("%d records in the state, want 5", got)
	}
}
