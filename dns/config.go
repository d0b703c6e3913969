package dns

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Addr is the host:port the server listens on, UDP and TCP alike. With
	// port 0 a free port is picked, the same for both.
	Addr string `json:"addr"`
	// MaxUDPSize caps the UDP payload the server sends and advertises in
	// EDNS0; clients that advertise less get less, clients without EDNS0
	// get 512 bytes.
	MaxUDPSize uint16 `json:"max_udp_size"`
	// UDPSockets is the number of UDP sockets bound to Addr, sharing it
	// with SO_REUSEPORT, each read by its own goroutine; 0 means
	// GOMAXPROCS. Where SO_REUSEPORT is missing there is one.
	UDPSockets int `json:"udp_sockets"`
	// RateLimit limits UDP responses per source address.
	RateLimit RateLimit `json:"rate_limit"`
	// MaxTCPConns bounds concurrent TCP connections; further ones are
	// closed at once.
	MaxTCPConns int `json:"max_tcp_conns"`
	// TCPIdleTimeout closes a TCP connection with no query for that long.
	TCPIdleTimeout time.Duration `json:"tcp_idle_timeout"`
	// TCPReadTimeout bounds reading the first query of a TCP connection and
	// every write.
	TCPReadTimeout time.Duration `json:"tcp_read_timeout"`
	// Transfer says who may transfer the zone and whom to notify.
	Transfer Transfer `json:"transfer"`
	// Metrics receives the server's Prometheus metrics (nil: unserved).
	Metrics prometheus.Registerer `json:"-"`
}

// RateLimit is a token bucket per source address for UDP responses: PerSecond
// tokens a second up to Burst. A query without a token is dropped, except
// that every Slip-th one gets an empty truncated answer so that a real
// client retries over TCP (Slip 0 drops all). PerSecond 0 disables the limit.
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	Slip      int     `json:"slip"`
	// MaxSources bounds the number of tracked addresses.
	MaxSources int `json:"max_sources"`
}

// Transfer configures zone transfers and NOTIFY.
//
// A transfer (AXFR, IXFR) is allowed only over TCP, from an address inside
// one of AllowFrom, and, when Keys is not empty, signed with one of Keys.
// Everything else is REFUSED.
type Transfer struct {
	AllowFrom []netip.Prefix `json:"allow_from"`
	// Keys are TSIG keys (hmac-sha256) by name, secret in base64.
	Keys map[string]string `json:"keys"`
	// Secondaries (host:port) get a NOTIFY when the serial changes.
	Secondaries []string `json:"secondaries"`
	// NotifyKey names the key in Keys that signs NOTIFY messages; empty
	// sends them unsigned.
	NotifyKey string `json:"notify_key"`
	// NotifyDelay debounces NOTIFY: it is sent once the serial has not
	// changed for that long.
	NotifyDelay time.Duration `json:"notify_delay"`
	// NotifyRetries is how many times an unanswered NOTIFY is resent,
	// with doubling timeouts from NotifyTimeout.
	NotifyRetries int           `json:"notify_retries"`
	NotifyTimeout time.Duration `json:"notify_timeout"`
}

// DefaultConfig returns the defaults: port 53 on all addresses, 1232-byte
// UDP answers, 1000 responses a second per source with a burst of 2000,
// 256 TCP connections idle at most 8 s, no transfers.
func DefaultConfig() Config {
	return Config{
		Addr:       ":53",
		MaxUDPSize: 1232,
		RateLimit: RateLimit{
			PerSecond:  1000,
			Burst:      2000,
			Slip:       2,
			MaxSources: 100000,
		},
		MaxTCPConns:    256,
		TCPIdleTimeout: 8 * time.Second,
		TCPReadTimeout: 2 * time.Second,
		Transfer: Transfer{
			NotifyDelay:   200 * time.Millisecond,
			NotifyRetries: 5,
			NotifyTimeout: time.Second,
		},
	}
}

// Validate reports the first problem in c, wrapping ErrBadConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrBadConfig)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return bad("addr %q: %v", c.Addr, err)
	}
	if c.MaxUDPSize < dns.MinMsgSize {
		return bad("max_udp_size %d below %d", c.MaxUDPSize, dns.MinMsgSize)
	}
	if c.UDPSockets < 0 || c.UDPSockets > maxUDPSockets {
		return bad("udp_sockets %d not in 0..%d", c.UDPSockets, maxUDPSockets)
	}
	if c.RateLimit.PerSecond < 0 || c.RateLimit.Burst < 0 || c.RateLimit.Slip < 0 {
		return bad("rate_limit: negative value")
	}
	if c.RateLimit.PerSecond > 0 && (c.RateLimit.Burst < 1 || c.RateLimit.MaxSources < 1) {
		return bad("rate_limit: burst and max_sources must be positive")
	}
	if c.MaxTCPConns < 1 || c.TCPIdleTimeout <= 0 || c.TCPReadTimeout <= 0 {
		return bad("tcp limits must be positive")
	}
	for name, secret := range c.Transfer.Keys {
		if _, ok := dns.IsDomainName(name); !ok || name == "" {
			return bad("tsig key name %q", name)
		}
		if _, err := base64.StdEncoding.DecodeString(secret); err != nil || secret == "" {
			return bad("tsig key %q: secret is not base64", name)
		}
	}
	if c.Transfer.NotifyKey != "" {
		if _, ok := c.Transfer.Keys[c.Transfer.NotifyKey]; !ok {
			return bad("notify_key %q is not in keys", c.Transfer.NotifyKey)
		}
	}
	for _, s := range c.Transfer.Secondaries {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return bad("secondary %q: %v", s, err)
		}
	}
	if len(c.Transfer.Secondaries) > 0 && (c.Transfer.NotifyTimeout <= 0 || c.Transfer.NotifyRetries < 0 || c.Transfer.NotifyDelay < 0) {
		return bad("notify timing")
	}
	return nil
}

// maxUDPSockets bounds Config.UDPSockets.
const maxUDPSockets = 256

// udpSockets returns the number of UDP sockets c asks for.
func (c Config) udpSockets() int {
	if c.UDPSockets > 0 {
		return c.UDPSockets
	}
	return runtime.GOMAXPROCS(0)
}

// tsigSecrets returns the keys in the form miekg/dns wants: canonical
// names.
func (t Transfer) tsigSecrets() map[string]string {
	if len(t.Keys) == 0 {
		return nil
	}
	m := make(map[string]string, len(t.Keys))
	for name, secret := range t.Keys {
		m[dns.CanonicalName(name)] = secret
	}
	return m
}
