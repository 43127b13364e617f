package rpclog

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cmfs-project/cmfs/internal/logtest"
)

// TestServerOptions: a call served is one debug line naming the method,
// the peer and the code, a failed one its error too.
func TestServerOptions(t *testing.T) {
	rec, log := logtest.New()
	srv := grpc.NewServer(ServerOptions(log)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := healthpb.NewHealthClient(conn)
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "none"}); err == nil {
		t.Fatal("check of an unknown service: no error")
	}
	lines := rec.Find("rpc")
	if len(lines) != 2 {
		t.Fatalf("lines %v, want one per call", rec.Lines(slog.LevelDebug))
	}
	for i, want := range []string{"OK", "NotFound"} {
		l := lines[i]
		if l.Level != slog.LevelDebug || l.Attrs["method"] != "/grpc.health.v1.Health/Check" || l.Attrs["code"] != want ||
			l.Attrs["peer"] == "" || (want != "OK") != (l.Attrs["err"] != "") {
			t.Errorf("line %d: %v, want debug, the method, a peer and code %s", i, l, want)
		}
	}
}
