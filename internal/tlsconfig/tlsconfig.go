// Package tlsconfig builds the mutual TLS configurations replicad's
// services use between peers, from PEM files (--tls-cert, --tls-key,
// --tls-ca), and decides which addresses may be used without TLS.
//
// Both sides speak TLS 1.3 only, present their certificate and verify the
// other's against the CA: a server requires a client certificate, and a
// client verifies the server's name as usual (the certificate must carry
// the host or IP it is dialed at). An optional allow-list narrows the
// peers further to those whose certificate names one of the list's names,
// as its common name or a DNS SAN; it is checked on both sides, after the
// chain is verified.
//
// Without TLS, a service listens on, and a client connects to, loopback
// addresses only: CheckLoopback is the one place that decides.
package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"
)

var (
	// ErrIncomplete is returned when some of the files are given but not
	// all three.
	ErrIncomplete = errors.New("tls: --tls-cert, --tls-key and --tls-ca go together")
	// ErrFile is wrapped for a file that cannot be read or used: missing,
	// unreadable, without PEM certificates, a key that does not match
	// the certificate, a certificate the CA did not sign.
	ErrFile = errors.New("tls: bad file")
	// ErrNotAllowed is wrapped when a peer's verified certificate names
	// no one on the allow-list.
	ErrNotAllowed = errors.New("tls: peer not on the allow-list")
	// ErrInsecure is wrapped (by *InsecureError) when CheckLoopback is
	// given an address that is not loopback.
	ErrInsecure = errors.New("non-loopback address without TLS")
	// ErrAddress is wrapped (by *AddressError) for an address without a
	// port or otherwise malformed.
	ErrAddress = errors.New("malformed address")
)

// Config names the PEM files of a node's identity and its trust.
type Config struct {
	// Cert is the node's certificate (chain), Key its private key. The
	// same pair serves as server and as client certificate, so it should
	// carry both extended key usages, and the names (DNS or IP SANs)
	// peers dial it by.
	Cert, Key string
	// CA holds the certificates peers' certificates must chain to.
	CA string
	// Allow, if not empty, lists the peer names accepted: a peer's
	// certificate must have one of them as its common name or a DNS SAN.
	Allow []string
}

// Enabled says whether any of it is given: TLS is wanted (and Server or
// Client says whether the configuration is complete: an allow-list alone
// is ErrIncomplete, not ignored).
func (c Config) Enabled() bool { return c.Cert != "" || c.Key != "" || c.CA != "" || len(c.Allow) > 0 }

// Server returns the configuration of a server: TLS 1.3, c's certificate,
// client certificates required and verified against c.CA, and the
// allow-list.
//
// Errors: ErrIncomplete; ErrFile (wrapped) naming the file and what is
// wrong with it.
func Server(c Config) (*tls.Config, error) {
	cert, pool, err := c.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        pool,
		VerifyConnection: c.verifyPeer,
	}, nil
}

// Client returns the configuration of a client: TLS 1.3, c's certificate
// presented as client certificate, the server's verified against c.CA
// (and its name against the address dialed), and the allow-list.
//
// Errors: as Server.
func Client(c Config) (*tls.Config, error) {
	cert, pool, err := c.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		RootCAs:          pool,
		VerifyConnection: c.verifyPeer,
	}, nil
}

// load reads and checks the three files: the key matches the
// certificate, and the CA signed it (a node whose own certificate its
// peers would refuse is a configuration error best reported at start).
func (c Config) load() (tls.Certificate, *x509.CertPool, error) {
	for _, f := range []struct{ flag, path string }{{"--tls-cert", c.Cert}, {"--tls-key", c.Key}, {"--tls-ca", c.CA}} {
		if f.path == "" {
			return tls.Certificate{}, nil, fmt.Errorf("%w: %s missing", ErrIncomplete, f.flag)
		}
	}
	certPEM, err := readFile("certificate", c.Cert)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyPEM, err := readFile("key", c.Key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caPEM, err := readFile("CA", c.CA)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return tls.Certificate{}, nil, fmt.Errorf("tls: CA %s holds no PEM certificate: %w", c.CA, ErrFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, nil, fmt.Errorf("tls: key %s does not match certificate %s: %w", c.Key, c.Cert, ErrFile)
		}
		return tls.Certificate{}, nil, fmt.Errorf("tls: certificate %s, key %s: %v: %w", c.Cert, c.Key, strings.TrimPrefix(err.Error(), "tls: "), ErrFile)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("tls: certificate %s: %v: %w", c.Cert, err, ErrFile)
		}
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := cert.Leaf.Verify(opts); err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls: certificate %s does not verify against CA %s: %v: %w", c.Cert, c.CA, strings.TrimPrefix(err.Error(), "x509: "), ErrFile)
	}
	return cert, pool, nil
}

func readFile(what, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("tls: %s %s: %v: %w", what, path, err, ErrFile)
	}
	return b, nil
}

// verifyPeer checks the allow-list against the peer's leaf certificate,
// which the handshake has verified by then.
func (c Config) verifyPeer(cs tls.ConnectionState) error {
	if len(c.Allow) == 0 {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("no peer certificate: %w", ErrNotAllowed)
	}
	leaf := cs.PeerCertificates[0]
	if slices.Contains(c.Allow, leaf.Subject.CommonName) {
		return nil
	}
	for _, n := range leaf.DNSNames {
		if slices.Contains(c.Allow, n) {
			return nil
		}
	}
	names := append([]string{leaf.Subject.CommonName}, leaf.DNSNames...)
	return fmt.Errorf("peer certificate %s is not on the allow-list: %w", strings.Join(names, ", "), ErrNotAllowed)
}

// InsecureError is CheckLoopback's refusal.
type InsecureError struct {
	// Op is what was refused ("listen on", "connect to"), Addr where.
	Op, Addr string
}

func (e *InsecureError) Error() string {
	return fmt.Sprintf("refusing to %s %s without TLS (--tls-cert, --tls-key, --tls-ca); use a loopback address such as 127.0.0.1", e.Op, e.Addr)
}

func (e *InsecureError) Unwrap() error { return ErrInsecure }

// AddressError is a malformed address.
type AddressError struct {
	Addr string
	Err  error
}

func (e *AddressError) Error() string { return fmt.Sprintf("address %q: %v", e.Addr, e.Err) }
func (e *AddressError) Unwrap() error { return ErrAddress }

// CheckLoopback refuses an address that is not loopback-only, for
// operation op ("listen on", "connect to"): a missing host (every
// interface), an address that is not loopback, a name that resolves to
// any address that is not.
//
// Errors: *InsecureError (wrapping ErrInsecure), *AddressError (wrapping
// ErrAddress), the resolver's.
func CheckLoopback(ctx context.Context, op, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return &AddressError{Addr: addr, Err: err}
	}
	if host == "" {
		return &InsecureError{Op: op, Addr: addr}
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	if len(ips) == 0 {
		return &InsecureError{Op: op, Addr: addr}
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return &InsecureError{Op: op, Addr: addr}
		}
	}
	return nil
}

// refusals are what a connection error says when a TLS handshake failed
// on a certificate: the alerts a peer sends (Go's wording), and this
// side's own verdicts. gRPC carries them as text only.
var refusals = []string{
	"remote error: tls: bad certificate",
	"remote error: tls: unknown certificate",
	"remote error: tls: certificate required",
	"remote error: tls: unsupported certificate",
	"remote error: tls: certificate revoked",
	"remote error: tls: certificate expired",
	"remote error: tls: access denied",
	"tls: failed to verify certificate",
	ErrNotAllowed.Error(),
}

// Refused says whether err (or a message) is a handshake refused on a
// certificate, by the peer or by this side: trying again will not help.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, r := range refusals {
		if strings.Contains(msg, r) {
			return true
		}
	}
	return false
}

// probeTimeout bounds Probe.
const probeTimeout = 5 * time.Second

// Probe makes one TLS handshake with the server at addr, as cfg's client,
// and waits for the server's first bytes: it returns the server's refusal
// of cfg's certificate, or nil when the server accepted it or nothing
// could be learned (unreachable, silent). In TLS 1.3 a client finishes its
// handshake before the server has checked its certificate, so a refusal
// can reach a gRPC call as a broken pipe or an EOF instead of the alert;
// the probe reads the alert itself.
func Probe(ctx context.Context, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"} // a gRPC server closes a connection without it
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if Refused(err) {
			return fmt.Errorf("handshake with %s: %w", addr, err)
		}
		return nil
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	conn.SetReadDeadline(dl)
	// An accepting gRPC server speaks first (its HTTP/2 settings).
	if _, err := conn.Read(make([]byte, 1)); err != nil && Refused(err) {
		return fmt.Errorf("handshake with %s: %w", addr, err)
	}
	return nil
}
