package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/internal/tlsconfig/tlstest"
)

// TestPushRetriedAfterReset cuts the push's connection after 3 MiB with
// toxiproxy's limit_data; the transfer starts again from offset 0 once
// the target has discarded the first attempt, and the target ends up
// with the exported bytes.
func TestPushRetriedAfterReset(t *testing.T) {
	ctx := context.Background()
	dst := startNode(t, newFakeStore(), Config{})
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(api, "push", "127.0.0.1:0", dst.addr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	const cut = `{"name": "cut", "type": "limit_data", "stream": "upstream", "attributes": {"bytes": 3145728}}`
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(cut)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var retried []error
	src := startNodeWith(t, newFakeStore(), fastRetry(), func(s *Server) {
		s.onRetry = func(attempt int, err error) {
			mu.Lock()
			retried = append(retried, err)
			mu.Unlock()
			proxy.Toxics.RemoveToxic(ctx, "cut") // the next attempt goes through
		}
	})
	data := src.store.add(t, 77, 8<<20)
	res, err := src.c.Replicate(ctx, Task{Container: 77, Target: proxy.Listen, WaitScan: true})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retried) == 0 || res.Attempts != len(retried)+1 {
		t.Fatalf("%d attempts, %d retries (%v): want a retry", res.Attempts, len(retried), retried)
	}
	if !errors.Is(retried[0], ErrUnavailable) {
		t.Errorf("the cut showed as %v, want ErrUnavailable", retried[0])
	}
	t.Logf("the cut: %v", retried[0])
	if got := dst.store.tarball(77); !bytes.Equal(got, data) {
		t.Fatalf("the target holds %d bytes, not the %d exported", len(got), len(data))
	}
	if res.Descriptor.State != container.Closed {
		t.Errorf("state %s after the scan, want CLOSED", res.Descriptor.State)
	}
	dst.store.mu.Lock()
	imports := dst.store.imports
	dst.store.mu.Unlock()
	if imports < 2 {
		t.Errorf("%d imports on the target: the cut did not reach it", imports)
	}
}

func TestBandwidthLimit(t *testing.T) {
	ctx := context.Background()
	const rate = 4 << 20
	for _, tc := range []struct {
		mode Mode
		size int
	}{{Push, 6 << 20}, {Pull, 4 << 20}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			src := startNode(t, newFakeStore(), Config{Bandwidth: rate})
			dst := startNode(t, newFakeStore(), Config{})
			data := src.store.add(t, 1, tc.size)
			start := time.Now()
			if _, err := src.c.Replicate(ctx, Task{Container: 1, Target: dst.addr, Mode: tc.mode}); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			// The limiter lets its burst (512 KiB here) through at once;
			// the rest takes at least its share of a second. Only a lower
			// bound, and a generous one: the machine may be slow.
			want := time.Duration(float64(tc.size-(512<<10)) / rate * 0.8 * float64(time.Second))
			if elapsed < want {
				t.Errorf("%d bytes at %d B/s in %v, want at least %v", tc.size, rate, elapsed, want)
			}
			if !bytes.Equal(dst.store.tarball(1), data) {
				t.Error("the target holds other bytes")
			}
		})
	}
}

func TestTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cluster CA")
	caFile := ca.WriteCert(t, dir)
	files := func(p tlstest.Pair) tlsconfig.Config { return tlsconfig.Config{Cert: p.Cert, Key: p.Key, CA: caFile} }
	nodeA, nodeB := ca.Issue(t, dir, "node-a"), ca.Issue(t, dir, "node-b")
	admin, stranger := ca.Issue(t, dir, "admin"), ca.Issue(t, dir, "stranger")
	foreign := tlstest.NewCA(t, "other CA").Issue(t, dir, "admin")

	clientTLS := func(cfg tlsconfig.Config) *tls.Config {
		c, err := tlsconfig.Client(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	src := startNode(t, newFakeStore(), Config{TLS: files(nodeA)}, WithTLS(clientTLS(files(admin))))
	dstCfg := files(nodeB)
	dstCfg.Allow = []string{"node-a", "admin"}
	dst := startNode(t, newFakeStore(), Config{TLS: dstCfg}, WithTLS(clientTLS(files(admin))))
	data := src.store.add(t, 5, 2<<20)

	for _, mode := range []Mode{Push, Pull} {
		id := uint64(5)
		if mode == Pull {
			id = 6
			src.store.add(t, 6, 1<<20)
		}
		if _, err := src.c.Replicate(ctx, Task{Container: id, Target: dst.addr, Mode: mode}); err != nil {
			t.Fatalf("%s over mTLS: %v", mode, err)
		}
	}
	if !bytes.Equal(dst.store.tarball(5), data) {
		t.Error("the target holds other bytes")
	}

	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(pem)
	cert := func(p tlstest.Pair) []tls.Certificate {
		c, err := tls.LoadX509KeyPair(p.Cert, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	foreignCert := cert(foreign)[0]
	for _, tc := range []struct {
		name string
		opts []Option
		want error
	}{
		// A refused certificate is ErrUnauthenticated, whether it shows
		// as the alert or as a broken pipe (the probe reads the alert).
		{"no client certificate", []Option{WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})}, ErrUnauthenticated},
		// Sent even though the server names the CAs it accepts (a
		// client with only Certificates would send none).
		{"certificate of another CA", []Option{WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreignCert, nil }})}, ErrUnauthenticated},
		{"not on the allow-list", []Option{WithTLS(clientTLS(files(stranger)))}, ErrUnauthenticated},
		{"no TLS", nil, ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(ctx, dst.addr, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if ds, err := c.List(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("list: %d containers, %v; want refused (%v)", len(ds), err, tc.want)
			} else {
				t.Log(err)
			}
		})
	}
	// The stranger is refused by the allow-list, not by the CA: a node
	// without one lets it in.
	c, err := Dial(ctx, src.addr, WithTLS(clientTLS(files(stranger))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(ctx); err != nil {
		t.Errorf("the stranger at a node without allow-list: %v", err)
	}
	// A node the target's allow-list does not name cannot replicate to
	// it, and does not try again: a broken pipe instead of the alert
	// (TLS 1.3 lets that happen) is probed and found the same refusal.
	for _, mode := range []Mode{Push, Pull} {
		strangerNode := startNode(t, newFakeStore(), Config{TLS: files(stranger), Backoff: 10 * time.Millisecond}, WithTLS(clientTLS(files(admin))))
		strangerNode.store.add(t, 9, 1000)
		_, err := strangerNode.c.Replicate(ctx, Task{Container: 9, Target: dst.addr, Mode: mode})
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "1 attempt)") {
			t.Errorf("%s: a node not on the target's allow-list: %v; want ErrUnauthenticated after 1 attempt", mode, err)
		} else {
			t.Log(err)
		}
	}
	// With TLS a node serves any address.
	srv, err := NewServer(newFakeStore(), Config{TLS: files(nodeA)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip(err)
	}
	sctx, stop := context.WithCancel(ctx)
	stop()
	if err := srv.Serve(sctx, lis); err != nil {
		t.Errorf("serve on %s with TLS: %v", lis.Addr(), err)
	}
}
