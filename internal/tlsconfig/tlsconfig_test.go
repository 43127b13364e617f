package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/tlsconfig/tlstest"
)

func TestHandshake(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	other := tlstest.NewCA(t, "other CA")
	dir := t.TempDir()
	caFile := ca.WriteCert(t, dir)
	server := ca.Issue(t, dir, "node-a", "node-a.example")
	good := ca.Issue(t, dir, "node-b")
	stranger := ca.Issue(t, dir, "node-x")
	foreign := other.Issue(t, dir, "node-b")

	for _, tc := range []struct {
		name        string
		server      Config
		client      Config // zero: the client presents no certificate
		clientCA    string // trust for the no-certificate client
		unchecked   bool   // build the client's configuration by hand: Client would refuse it
		maxVersion  uint16
		serverWants error // nil: the handshake succeeds
	}{
		{name: "good", server: files(server, caFile), client: files(good, caFile)},
		{name: "good, on the allow-list by CN", server: allow(files(server, caFile), "node-b"), client: files(good, caFile)},
		{name: "good, on the allow-list by DNS SAN", server: allow(files(server, caFile), "node-b.test"), client: files(good, caFile)},
		{name: "no client certificate", server: files(server, caFile), clientCA: caFile, serverWants: errAny},
		{name: "certificate from another CA", server: files(server, caFile), client: Config{Cert: foreign.Cert, Key: foreign.Key, CA: caFile}, unchecked: true, serverWants: errAny},
		{name: "not on the allow-list", server: allow(files(server, caFile), "node-b", "node-c"), client: files(stranger, caFile), serverWants: ErrNotAllowed},
		{name: "TLS 1.2", server: files(server, caFile), client: files(good, caFile), maxVersion: tls.VersionTLS12, serverWants: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scfg, err := Server(tc.server)
			if err != nil {
				t.Fatal(err)
			}
			var ccfg *tls.Config
			switch {
			case tc.unchecked:
				cert, err := tls.LoadX509KeyPair(tc.client.Cert, tc.client.Key)
				if err != nil {
					t.Fatal(err)
				}
				ccfg = &tls.Config{RootCAs: pool(t, tc.client.CA), Certificates: []tls.Certificate{cert}}
			case tc.client.Enabled():
				if ccfg, err = Client(tc.client); err != nil {
					t.Fatal(err)
				}
			default:
				ccfg = &tls.Config{RootCAs: pool(t, tc.clientCA)}
			}
			ccfg.ServerName = "node-a.example"
			if tc.maxVersion != 0 {
				ccfg.MinVersion, ccfg.MaxVersion = tls.VersionTLS12, tc.maxVersion
			}
			serr, cerr := handshake(t, scfg, ccfg)
			switch {
			case tc.serverWants == nil && (serr != nil || cerr != nil):
				t.Fatalf("server: %v, client: %v; want success", serr, cerr)
			case tc.serverWants != nil && serr == nil:
				t.Fatal("the server accepted the client")
			case tc.serverWants != nil && cerr == nil:
				t.Fatal("the client did not learn it was refused")
			case tc.serverWants != nil && tc.serverWants != errAny && !errors.Is(serr, tc.serverWants):
				t.Fatalf("server: %v, want %v", serr, tc.serverWants)
			}
		})
	}
}

// errAny stands for any handshake error.
var errAny = errors.New("any error")

func TestClientChecksServer(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	caFile := ca.WriteCert(t, dir)
	server := ca.Issue(t, dir, "node-a")
	client := ca.Issue(t, dir, "node-b")
	scfg, err := Server(files(server, caFile))
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := Client(allow(files(client, caFile), "node-c"))
	if err != nil {
		t.Fatal(err)
	}
	ccfg.ServerName = "127.0.0.1"
	if _, cerr := handshake(t, scfg, ccfg); !errors.Is(cerr, ErrNotAllowed) {
		t.Fatalf("client: %v, want ErrNotAllowed", cerr)
	}
	ccfg, _ = Client(files(client, caFile))
	ccfg.ServerName = "192.0.2.1" // not among the server certificate's names
	if _, cerr := handshake(t, scfg, ccfg); cerr == nil || !strings.Contains(cerr.Error(), "192.0.2.1") {
		t.Fatalf("client: %v, want a name mismatch", cerr)
	}
}

// handshake runs a TLS handshake over an in-memory pipe and then one
// byte each way (in TLS 1.3 the client learns the server refused its
// certificate only when it reads). It returns each side's error.
func handshake(t *testing.T, scfg, ccfg *tls.Config) (serr, cerr error) {
	t.Helper()
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	deadline := time.Now().Add(10 * time.Second)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		s := tls.Server(sc, scfg)
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		if err != nil {
			sc.Close()
		}
		done <- err
	}()
	c := tls.Client(cc, ccfg)
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
	}
	if cerr != nil {
		cc.Close()
	}
	return <-done, cerr
}

func TestFileErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	other := tlstest.NewCA(t, "other CA")
	dir := t.TempDir()
	caFile := ca.WriteCert(t, dir)
	a := ca.Issue(t, dir, "node-a")
	b := ca.Issue(t, dir, "node-b")
	foreign := other.Issue(t, dir, "node-f")
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not PEM\n"), 0o600)
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
		msg  string
	}{
		{"key missing", Config{Cert: a.Cert, CA: caFile}, ErrIncomplete, "--tls-key missing"},
		{"allow-list alone", Config{Allow: []string{"node-a"}}, ErrIncomplete, "--tls-cert missing"},
		{"cert missing", Config{Key: a.Key, CA: caFile}, ErrIncomplete, "--tls-cert missing"},
		{"no such file", Config{Cert: filepath.Join(dir, "nope.pem"), Key: a.Key, CA: caFile}, ErrFile, "nope.pem: no such file or directory"},
		{"CA not PEM", Config{Cert: a.Cert, Key: a.Key, CA: garbage}, ErrFile, "holds no PEM certificate"},
		{"cert not PEM", Config{Cert: garbage, Key: a.Key, CA: caFile}, ErrFile, "garbage.pem"},
		{"mismatched key", Config{Cert: a.Cert, Key: b.Key, CA: caFile}, ErrFile, "does not match certificate"},
		{"other CA", Config{Cert: foreign.Cert, Key: foreign.Key, CA: caFile}, ErrFile, "does not verify against CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, build := range []func(Config) (*tls.Config, error){Server, Client} {
				_, err := build(tc.cfg)
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.msg) || strings.Contains(msg, "\n") {
					t.Errorf("message %q: want one line with %q", msg, tc.msg)
				}
			}
		})
	}
	if (Config{}).Enabled() || !(Config{CA: caFile}).Enabled() || !(Config{Allow: []string{"a"}}).Enabled() {
		t.Error("Enabled is wrong")
	}
}

func TestCheckLoopback(t *testing.T) {
	ctx := context.Background()
	for _, addr := range []string{"127.0.0.1:9860", "[::1]:9860", "localhost:9860", "127.0.0.2:0"} {
		if err := CheckLoopback(ctx, "listen on", addr); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:9860", ":9860", "[::]:9860", "192.0.2.1:9860", "[2001:db8::1]:9860"} {
		err := CheckLoopback(ctx, "connect to", addr)
		var ie *InsecureError
		if !errors.Is(err, ErrInsecure) || !errors.As(err, &ie) || ie.Addr != addr || ie.Op != "connect to" {
			t.Errorf("%s: got %v, want an InsecureError", addr, err)
		}
	}
	err := CheckLoopback(ctx, "listen on", "127.0.0.1")
	if !errors.Is(err, ErrAddress) || err.Error() != `address "127.0.0.1": missing port in address` {
		t.Errorf("got %v, want a missing port", err)
	}
}

func pool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

func files(p tlstest.Pair, caFile string) Config { return Config{Cert: p.Cert, Key: p.Key, CA: caFile} }

func allow(c Config, names ...string) Config {
	c.Allow = names
	return c
}
