package logs

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Shipping sends every line the store takes on, as it is stored, to a
// syslog receiver (RFC 5424 messages over TCP or TLS, octet-counted as
// RFC 6587 says: rsyslog, syslog-ng, vector, promtail take them) and/or
// appends it to a file of JSON lines that journald, vector or promtail
// read. A slow or absent receiver never slows the store: lines wait in a
// bounded queue, and those that do not fit are dropped and counted
// (Dropped), with a line saying so once the receiver is back.
//
// A syslog message:
//
//	<14>1 2026-11-26T05:00:00.123Z n1 hello-dev web app [corpus@32473 project="hello" release="r3" source="app"] the line
//
// APP-NAME is the guest, PROCID the process ("-" for deploy and system
// lines), MSGID the source. 32473 is the private enterprise number RFC
// 5612 sets aside for documentation: the structured data is corpus's own.

// ShipConfig says where lines go.
type ShipConfig struct {
	// Syslog is tcp://HOST:PORT or tls://HOST:PORT; empty: none.
	Syslog string
	// CAFile verifies a tls:// receiver (the system's roots without it).
	CAFile string
	// File is a path to append JSON lines to; empty: none.
	File string
	// Node is the HOSTNAME of syslog messages.
	Node string
	// Names gives a guest id's name and project ("" when none).
	Names func(id string) (guest, project string)
	// Queue is how many lines wait for a slow receiver (default 10000).
	Queue  int
	Logger *slog.Logger
}

// Shipper sends stored lines on.
type Shipper struct {
	cfg     ShipConfig
	tls     *tls.Config
	q       chan shipped
	dropped atomic.Uint64
}

type shipped struct {
	id string
	e  Entry
}

// NewShipper checks cfg and returns a Shipper; Run sends.
func NewShipper(cfg ShipConfig) (*Shipper, error) {
	if cfg.Queue <= 0 {
		cfg.Queue = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Names == nil {
		cfg.Names = func(id string) (string, string) { return id, "" }
	}
	s := &Shipper{cfg: cfg, q: make(chan shipped, cfg.Queue)}
	if cfg.Syslog != "" {
		u, err := url.Parse(cfg.Syslog)
		if err != nil || (u.Scheme != "tcp" && u.Scheme != "tls") || u.Host == "" || u.Port() == "" {
			return nil, fmt.Errorf("log shipping: syslog target %q: want tcp://HOST:PORT or tls://HOST:PORT", cfg.Syslog)
		}
		if u.Scheme == "tls" {
			s.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
			if cfg.CAFile != "" {
				pem, err := os.ReadFile(cfg.CAFile)
				if err != nil {
					return nil, fmt.Errorf("log shipping: %w", err)
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return nil, fmt.Errorf("log shipping: no certificate in %s", cfg.CAFile)
				}
				s.tls.RootCAs = pool
			}
		}
	}
	return s, nil
}

// Ship queues lines of guest id; it never blocks.
func (s *Shipper) Ship(id string, es []Entry) {
	for _, e := range es {
		select {
		case s.q <- shipped{id, e}:
		default:
			s.dropped.Add(1)
		}
	}
}

// Dropped is how many lines did not fit the queue.
func (s *Shipper) Dropped() uint64 { return s.dropped.Load() }

// Run sends queued lines until ctx ends, connecting again (with a wait
// that grows to 30 s) when the receiver goes.
func (s *Shipper) Run(ctx context.Context) {
	var (
		conn    net.Conn
		w       *bufio.Writer
		file    *os.File
		wait    = time.Second
		retryAt time.Time
		pending *shipped // taken from the queue, not yet sent
		told    uint64   // drops already said
	)
	defer func() {
		if conn != nil {
			w.Flush()
			conn.Close()
		}
		if file != nil {
			file.Close()
		}
	}()
	for {
		var it shipped
		if pending != nil {
			it, pending = *pending, nil
		} else {
			select {
			case <-ctx.Done():
				return
			case it = <-s.q:
			}
		}
		if s.cfg.File != "" {
			if file == nil {
				f, err := os.OpenFile(s.cfg.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
				if err != nil {
					s.cfg.Logger.Warn("log shipping: opening the file", "file", s.cfg.File, "error", err)
				} else {
					file = f
				}
			}
			if file != nil {
				if _, err := file.Write(s.jsonLine(it)); err != nil {
					s.cfg.Logger.Warn("log shipping: writing the file", "file", s.cfg.File, "error", err)
					file.Close()
					file = nil
				}
			}
		}
		if s.cfg.Syslog == "" {
			continue
		}
		if conn == nil {
			if time.Now().Before(retryAt) {
				s.dropped.Add(1) // the receiver is away: lines go on being stored on the node
				continue
			}
			c, err := s.dial(ctx)
			if err != nil {
				s.cfg.Logger.Warn("log shipping: connecting", "target", s.cfg.Syslog, "error", err, "retry_in", wait)
				retryAt = time.Now().Add(wait)
				wait = min(2*wait, 30*time.Second)
				s.dropped.Add(1)
				continue
			}
			conn, w, wait = c, bufio.NewWriterSize(c, 64<<10), time.Second
		}
		if d := s.dropped.Load(); d > told {
			told = d
			note := shipped{"", Entry{Time: time.Now(), Source: SourceSystem, Line: fmt.Sprintf("[corpus] %d log lines were not shipped (the receiver was away or slow); the node keeps them", d)}}
			s.writeSyslog(w, note)
		}
		s.writeSyslog(w, it)
		// Flush when nothing else waits: a burst goes out in few writes.
		if len(s.q) == 0 {
			conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := w.Flush(); err != nil {
				s.cfg.Logger.Warn("log shipping: sending", "target", s.cfg.Syslog, "error", err)
				conn.Close()
				conn = nil
				s.dropped.Add(1)
			}
		}
	}
}

func (s *Shipper) dial(ctx context.Context) (net.Conn, error) {
	u, _ := url.Parse(s.cfg.Syslog)
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if s.tls != nil {
		td := &tls.Dialer{NetDialer: d, Config: s.tls}
		return td.DialContext(ctx, "tcp", u.Host)
	}
	return d.DialContext(ctx, "tcp", u.Host)
}

// jsonLine is the file form of a line.
func (s *Shipper) jsonLine(it shipped) []byte {
	guest, project := s.cfg.Names(it.id)
	b, _ := json.Marshal(struct {
		Time    time.Time `json:"time"`
		Node    string    `json:"node"`
		Guest   string    `json:"guest,omitempty"`
		Project string    `json:"project,omitempty"`
		Source  string    `json:"source"`
		Process string    `json:"process,omitempty"`
		Release string    `json:"release,omitempty"`
		Line    string    `json:"line"`
	}{it.e.Time.UTC(), s.cfg.Node, guest, project, it.e.Source, it.e.Process, it.e.Release, it.e.Line})
	return append(b, '\n')
}

// writeSyslog writes one octet-counted RFC 5424 message.
func (s *Shipper) writeSyslog(w *bufio.Writer, it shipped) {
	guest, project := s.cfg.Names(it.id)
	msg := syslogMessage(s.cfg.Node, guest, project, it.e)
	fmt.Fprintf(w, "%d %s", len(msg), msg)
}

// syslogMessage formats e as RFC 5424 (facility user, severity info).
func syslogMessage(node, guest, project string, e Entry) string {
	sd := "[corpus@32473"
	for _, kv := range [][2]string{{"project", project}, {"release", e.Release}, {"source", e.Source}} {
		if kv[1] != "" {
			sd += " " + kv[0] + `="` + sdEscape(kv[1]) + `"`
		}
	}
	sd += "]"
	return fmt.Sprintf("<14>1 %s %s %s %s %s %s %s",
		e.Time.UTC().Format("2006-01-02T15:04:05.000000Z"), header(node, 255), header(guest, 48),
		header(e.Process, 128), header(e.Source, 32), sd, strings.ToValidUTF8(e.Line, "\uFFFD"))
}

// header is a header field: printable ASCII without spaces, cut to max,
// "-" when empty.
func header(s string, max int) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(out) < max; i++ {
		if c := s[i]; c > 32 && c < 127 {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return string(out)
}

// sdEscape escapes a structured-data value (RFC 5424 6.3.3).
func sdEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, `]`, `\]`).Replace(s)
}
