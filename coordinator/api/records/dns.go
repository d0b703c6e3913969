// Package records serves DnsService: the records of the cluster zone an
// operator lists, adds and deletes, as the caller may see them.
package records

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/dns"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// staticTypes are the record types operators may add.
var staticTypes = map[string]bool{"A": true, "AAAA": true, "CNAME": true, "TXT": true, "MX": true, "SRV": true}

// generatedSubtrees hold the names corpus publishes itself.
var generatedSubtrees = []string{"guest", "node", "ns"}

// New returns the handler of DnsService.
func New(b *api.Backend) corpusv1connect.DnsServiceHandler { return &dnsService{b} }

type dnsService struct{ b *api.Backend }

func (s *dnsService) zone() (*dns.Zone, error) {
	var z *dns.Zone
	if s.b.Zones != nil {
		z = s.b.Zone()
	}
	if z == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this coordinator serves no DNS (its dns address is empty)"))
	}
	return z, nil
}

func (s *dnsService) ListRecords(ctx context.Context, _ *connect.Request[corpusv1.ListRecordsRequest]) (*connect.Response[corpusv1.ListRecordsResponse], error) {
	if _, err := s.zone(); err != nil {
		return nil, err
	}
	// As of the state, not the served zone, which may lag: the listing
	// must show every record this replica has applied.
	z := s.b.ZoneNow()
	view := s.b.Store.Read()
	static := map[string]string{} // canonical key -> id
	for _, r := range view.DNSRecords() {
		static[r.Key] = r.Id
	}
	hidden := hiddenNames(view, auth.ScopeOf(view, auth.FromContext(ctx)), z.Origin())
	res := &corpusv1.ListRecordsResponse{Zone: z.Origin(), Serial: z.Serial(), DnsAddr: s.b.DNSAddr()}
	for _, r := range z.Records() {
		if hidden[srvOwner(r.Name)] {
			continue
		}
		res.Records = append(res.Records, &corpusv1.ZoneRecord{
			Name: r.Name, Type: r.Type, Ttl: r.TTL, Data: r.Data, StaticId: static[recordKey(r)],
		})
	}
	// What the zone leaves out, with why: a record that cannot be served
	// must not go unnoticed.
	for _, sk := range z.Skipped() {
		r := sk.Record
		res.Records = append(res.Records, &corpusv1.ZoneRecord{
			Name: r.Name, Type: r.Type, Ttl: r.TTL, Data: r.Data, StaticId: static[recordKey(r)],
			Warning: "not served: " + sk.Err.Error(),
		})
	}
	return connect.NewResponse(res), nil
}

// hiddenNames are the zone's names (canonical, under origin) of what
// scope does not see: guests' NAME.guest and project environments'
// PROJECT.ENV. The name servers, the nodes and the operators' records
// are the cluster's, which every user reads.
func hiddenNames(view *state.Snap, scope *auth.Scope, origin string) map[string]bool {
	hidden := map[string]bool{}
	if scope.All() {
		return hidden
	}
	for _, g := range view.Guests() {
		if scope.Guest(g) == auth.NoAccess {
			hidden[g.Name+".guest."+origin] = true
		}
	}
	for _, p := range view.Projects() {
		if scope.Project(p) == auth.NoAccess {
			for _, e := range p.Envs {
				hidden[p.Name+"."+e.Name+"."+origin] = true
			}
		}
	}
	return hidden
}

// srvOwner is the name an SRV record's _SERVICE._tcp.NAME is about, and
// any other name as it is.
func srvOwner(name string) string {
	if rest, ok := strings.CutPrefix(name, "_"); ok {
		if _, owner, ok := strings.Cut(rest, "._tcp."); ok {
			return owner
		}
	}
	return name
}

// recordKey is the canonical identity of a record: absolute name, type, data.
func recordKey(r dns.Record) string {
	return strings.ToLower(r.Name) + " " + r.Type + " " + r.Data
}

// canonical validates a record against the zone it goes into and returns
// it in the zone's own canonical form.
func canonical(zone string, r dns.Record) (dns.Record, error) {
	r.Type = strings.ToUpper(strings.TrimSpace(r.Type))
	if !staticTypes[r.Type] {
		return dns.Record{}, api.Invalidf("record type %q: use A, AAAA, CNAME, TXT, MX or SRV", r.Type)
	}
	z, err := dns.NewZone(zone, 0, []dns.Record{r})
	if err != nil {
		return dns.Record{}, api.Invalidf("record %s %s %q: %v", r.Name, r.Type, r.Data, err)
	}
	var found []dns.Record // the zone adds its own SOA and NS; allowed types are neither
	for _, rec := range z.Records() {
		if rec.Type == r.Type {
			found = append(found, rec)
		}
	}
	if len(found) != 1 {
		return dns.Record{}, api.Invalidf("record %s %s %q is not one record", r.Name, r.Type, r.Data)
	}
	out := found[0]
	for _, sub := range generatedSubtrees {
		suffix := "." + sub + "." + z.Origin()
		if strings.HasSuffix(strings.ToLower(out.Name), suffix) || strings.EqualFold(out.Name, sub+"."+z.Origin()) {
			return dns.Record{}, api.Invalidf("names under %s.%s are published from the cluster state; pick another name", sub, z.Origin())
		}
	}
	return out, nil
}

func (s *dnsService) AddRecord(ctx context.Context, req *connect.Request[corpusv1.AddRecordRequest]) (*connect.Response[corpusv1.AddRecordResponse], error) {
	z, err := s.zone()
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if m.Name == "" || m.Data == "" {
		return nil, api.ToConnect(api.Invalidf("a record needs a name and data, for example: corpus dns add www A 10.0.0.5"))
	}
	if err := api.ValidDNSName("record name", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := api.ValidText("record data", m.Data, 1024); err != nil {
		return nil, api.ToConnect(err)
	}
	if strings.EqualFold(strings.TrimSpace(m.Type), "CNAME") {
		if err := api.ValidDNSName("CNAME target", m.Data); err != nil || m.Data == "@" {
			return nil, api.ToConnect(api.Invalidf("CNAME target %.80q is not a DNS name", m.Data))
		}
	}
	rec, err := canonical(z.Origin(), dns.Record{Name: m.Name, Type: m.Type, TTL: m.Ttl, Data: m.Data})
	if err != nil {
		return nil, api.ToConnect(err)
	}
	key := recordKey(rec)
	if old := s.b.Store.Read().DNSRecordByKey(key); old != nil {
		// An answer from the state alone: from the current state.
		view, err := s.b.Current(ctx)
		if err != nil {
			return nil, err
		}
		if old := view.DNSRecordByKey(key); old != nil {
			return connect.NewResponse(&corpusv1.AddRecordResponse{Record: old}), nil
		}
	}
	// A record the zone could not serve beside what it holds (a CNAME
	// and other data at one name) is refused here, also against the
	// names the cluster publishes; the state refuses conflicts among
	// static records however they come in. Checked at the record's name
	// alone: rebuilding the zone with it made each add cost as much as
	// the zone's size.
	if err := s.b.RecordFits(rec); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("%w; a name with a CNAME holds no other record (RFC 1034 section 3.6.2): pick another name or delete the other record (corpus dns records lists them); nothing changed", err))
	}
	ttl := m.Ttl
	if ttl == 0 {
		ttl = dns.DefaultTTL
	}
	r := &corpusv1.DnsRecord{Id: secret.Hex(6), Name: rec.Name, Type: rec.Type, Ttl: ttl, Data: rec.Data, Key: key}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_AddDnsRecord{AddDnsRecord: &corpusv1.AddDnsRecord{Record: r}}})
	if errors.Is(err, state.ErrExists) {
		// A concurrent add of the same record won: adding is idempotent.
		if old := s.b.Store.Read().DNSRecordByKey(key); old != nil {
			return connect.NewResponse(&corpusv1.AddRecordResponse{Record: old}), nil
		}
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.AddRecordResponse{Record: s.b.Store.Read().DNSRecord(r.Id), Created: true}), nil
}

func (s *dnsService) DeleteRecord(ctx context.Context, req *connect.Request[corpusv1.DeleteRecordRequest]) (*connect.Response[corpusv1.DeleteRecordResponse], error) {
	if err := api.ValidID("dns record", req.Msg.Id, "corpus dns records"); err != nil {
		return nil, api.ToConnect(err)
	}
	r := s.b.Store.Read().DNSRecord(req.Msg.Id)
	if r == nil {
		return nil, api.ToConnect(api.NotFound("dns record", req.Msg.Id, "corpus dns records"))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteDnsRecord{DeleteDnsRecord: &corpusv1.DeleteDnsRecord{Id: r.Id}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteRecordResponse{Record: r}), nil
}
