package metricsrv

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestServe: /metrics answers with the handler until the context ends;
// then the server is down and the wait group done.
func TestServe(t *testing.T) {
	lis, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	addr := Serve(ctx, &wg, lis, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "up 1\n")
	}))
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "up 1\n" {
		t.Errorf("GET /metrics: %q, want the handler's", body)
	}
	cancel()
	wg.Wait()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts after the context ended", addr)
	}
}

// TestListenInUse: an address in use is one error that names it.
func TestListenInUse(t *testing.T) {
	lis, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	_, err = Listen(lis.Addr().String())
	if err == nil || !strings.HasPrefix(err.Error(), "metrics: listen "+lis.Addr().String()+": ") || strings.Contains(err.Error(), "tcp") {
		t.Errorf("Listen on an address in use: %v, want \"metrics: listen ADDR: REASON\" without the op's wrapper", err)
	}
}
