package auth

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestFileCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	tok, err := File(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(tok); err != nil || len(b) != tokenBytes {
		t.Errorf("token %q: %d bytes, %v; want %d hex-encoded", tok, len(b), err, tokenBytes)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode %04o, want 0600", got)
	}
	again, err := File(path)
	if err != nil || again != tok {
		t.Errorf("second File: %q, %v; want the first token %q", again, err, tok)
	}
	if got, err := Read(path); err != nil || got != tok {
		t.Errorf("Read: %q, %v; want %q", got, err, tok)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("%d entries next to the token file, want it alone", len(entries))
	}
}

// Servers that start at once share one token: the first file wins.
func TestFileConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	toks := make([]string, 8)
	var wg sync.WaitGroup
	for i := range toks {
		wg.Go(func() {
			tok, err := File(path)
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		})
	}
	wg.Wait()
	for _, tok := range toks[1:] {
		if tok != toks[0] {
			t.Fatalf("tokens differ: %q", toks)
		}
	}
}

func TestFileRefusesUnsafe(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"group readable", func(t *testing.T, path string) { write(t, path, tok, 0o640) }, "chmod 600"},
		{"other writable", func(t *testing.T, path string) { write(t, path, tok, 0o602) }, "chmod 600"},
		{"symlink", func(t *testing.T, path string) {
			write(t, path+".real", tok, 0o600)
			if err := os.Symlink(path+".real", path); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"short", func(t *testing.T, path string) { write(t, path, "abc", 0o600) }, "holds no token"},
		{"empty", func(t *testing.T, path string) { write(t, path, "", 0o600) }, "holds no token"},
		{"other owner", func(t *testing.T, path string) {
			if os.Getuid() != 0 {
				t.Skip("chown needs root")
			}
			write(t, path, tok, 0o600)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "not to the serving uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			tc.make(t, path)
			_, err := File(path)
			if !errors.Is(err, ErrFile) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("got %v, want ErrFile naming %s and saying %q", err, path, tc.want)
			}
		})
	}
}

func TestReadMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if _, err := Read(path); !errors.Is(err, ErrFile) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("got %v, want ErrFile saying it does not exist", err)
	}
}

func write(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // whatever the umask
		t.Fatal(err)
	}
}

// TestServerOptions calls a unary and a streaming method (the health
// service's) without a token, with a wrong one and with the right one.
func TestServerOptions(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	srv := grpc.NewServer(ServerOptions(tok)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []grpc.DialOption{grpc.WithPerRPCCredentials(Credentials("fedcba9876543210fedcba9876543210"))}, codes.Unauthenticated},
		{"token prefix", []grpc.DialOption{grpc.WithPerRPCCredentials(Credentials(tok[:16]))}, codes.Unauthenticated},
		{"token", []grpc.DialOption{grpc.WithPerRPCCredentials(Credentials(tok))}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := grpc.NewClient(lis.Addr().String(), append(tc.opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := healthpb.NewHealthClient(conn)
			_, err = c.Check(ctx, &healthpb.HealthCheckRequest{})
			if got := status.Code(err); got != tc.want {
				t.Errorf("unary: %v, want %v", err, tc.want)
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			if got := status.Code(err); got != tc.want {
				t.Errorf("stream: %v, want %v", err, tc.want)
			}
		})
	}
}
