package dns

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// recorder is a dns.ResponseWriter that keeps what is written; a fake
// because the fuzzer needs no sockets.
type recorder struct {
	udp  bool
	msgs []*dns.Msg
}

func (r *recorder) LocalAddr() net.Addr {
	if r.udp {
		return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}

func (r *recorder) RemoteAddr() net.Addr {
	if r.udp {
		return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5353}
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5353}
}

func (r *recorder) WriteMsg(m *dns.Msg) error {
	r.msgs = append(r.msgs, m)
	return nil
}
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) Close() error                { return nil }
func (r *recorder) TsigStatus() error           { return nil }
func (r *recorder) TsigTimersOnly(bool)         {}
func (r *recorder) Hijack()                     {}

// FuzzServeDNS feeds arbitrary bytes through the path a packet takes in
// the server: header check, unpack, ServeDNS, pack. It must never panic,
// and answers to refused or failed queries must not be larger than the
// query plus a small bound.
func FuzzServeDNS(f *testing.F) {
	for _, m := range []*dns.Msg{
		query("web.guest.corpus.test.", dns.TypeA),
		query("big.corpus.test.", dns.TypeA),
		query("alias.corpus.test.", dns.TypeANY),
		query("example.org.", dns.TypeA),
		query("corpus.test.", dns.TypeAXFR),
		query("corpus.test.", dns.TypeIXFR),
	} {
		m.SetEdns0(4096, true)
		b, _ := m.Pack()
		f.Add(b, true)
		f.Add(b, false)
	}
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c}, true)

	cfg := testConfig()
	cfg.Transfer.AllowFrom = nil
	s, err := New(cfg, NewStaticSource(testZone(f, 1)), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte, udp bool) {
		if len(raw) < 12 {
			return
		}
		h := dns.Header{
			Id:      binary.BigEndian.Uint16(raw[0:]),
			Bits:    binary.BigEndian.Uint16(raw[2:]),
			Qdcount: binary.BigEndian.Uint16(raw[4:]),
			Ancount: binary.BigEndian.Uint16(raw[6:]),
			Nscount: binary.BigEndian.Uint16(raw[8:]),
			Arcount: binary.BigEndian.Uint16(raw[10:]),
		}
		if acceptMsg(h) != dns.MsgAccept {
			return
		}
		req := new(dns.Msg)
		if err := req.Unpack(raw); err != nil {
			return
		}
		w := &recorder{udp: udp}
		s.ServeDNS(w, req)
		for _, m := range w.msgs {
			out, err := m.Pack()
			if err != nil {
				t.Fatalf("packing the answer: %v\n%v", err, m)
			}
			if udp && len(out) > int(cfg.MaxUDPSize) {
				t.Fatalf("UDP answer of %d bytes", len(out))
			}
			if m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError && len(out) > len(raw)+64 {
				t.Fatalf("%s answer of %d bytes to a %d-byte query", dns.RcodeToString[m.Rcode], len(out), len(raw))
			}
		}
	})
}
