// Package etcdtest runs a real etcd server (Debian's etcd-server, the
// `etcd` binary) for a test: one member on 127.0.0.1 ports of its own,
// its data in t.TempDir(), killed at the test's end.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// Server is a running etcd.
type Server struct {
	// Endpoint is its client address, host:port.
	Endpoint string
	cmd      *exec.Cmd
	mu       sync.Mutex
	out      bytes.Buffer
}

// Start starts etcd and waits until it answers. Without the etcd binary
// the test is skipped, or fails when CI=true (CI installs it).
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		const why = "etcd is not installed (Debian: apt-get install etcd-server)"
		if os.Getenv("CI") == "true" {
			t.Fatal(why + "; CI=true makes this a failure")
		}
		t.Skip(why)
	}
	client, peer := freePort(t), freePort(t)
	s := &Server{Endpoint: client}
	s.cmd = exec.Command(bin,
		"--name", "test", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "test=http://"+peer,
		// Leases checked, and a leader elected, in a fraction of a second.
		"--heartbeat-interval", "50", "--election-timeout", "500",
	)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		if t.Failed() {
			t.Logf("etcd output:\n%s", s.output())
		}
	})
	cli := s.Client(t)
	ok := wait.Until(20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "probe")
		return err == nil
	})
	if !ok {
		t.Fatalf("etcd on %s did not answer within 20s:\n%s", client, s.output())
	}
	return s
}

// Write collects etcd's output, shown if the test fails.
func (s *Server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

func (s *Server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Client returns a client of s, closed at the test's end.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freePort returns a 127.0.0.1 address nothing listens on now.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}
